// Compiles every schema named on the command line with ajv (draft 2020-12)
// in strict mode; all of them are added first, so that $refs between them
// resolve. Prints one line per schema and exits 1 on the first that fails.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";

const ajv = new Ajv2020({ strict: true, allErrors: true });
const schemas = process.argv.slice(2).map((path) => ({ path, schema: JSON.parse(readFileSync(path, "utf8")) }));
for (const { schema } of schemas) ajv.addSchema(schema);
let failed = false;
for (const { path, schema } of schemas) {
  try {
    ajv.getSchema(schema.$id) ?? ajv.compile(schema);
    console.log(`ok ${path}`);
  } catch (err) {
    console.log(`FAIL ${path}: ${err.message}`);
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
