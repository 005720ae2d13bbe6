// The wire types follow the service: src/wire.ts must be exactly what
// openapi-typescript generates from the OpenAPI document the running service
// serves (and from server/openapi.json), so an API change the client does not
// follow fails here.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
// @ts-ignore: a plain ESM script of the package (scripts/wire.mjs), without types
import { load, wireFile, wireSource } from "../../scripts/wire.mjs";
import { server, skip } from "./helpers.js";

const regenerate = "src/wire.ts is not what the service's OpenAPI document generates: run `npm run generate` in clients/typescript and follow the change in src/";

test("src/wire.ts is generated from the OpenAPI document the service serves", { skip }, async () => {
  const served = await wireSource(await load(`${server}/v1/openapi.json`));
  assert.equal(await readFile(wireFile, "utf8"), served, regenerate);
});

test("src/wire.ts is generated from server/openapi.json", async () => {
  const fromFile = await wireSource(await load(new URL("../../../../server/openapi.json", import.meta.url).pathname));
  assert.equal(await readFile(wireFile, "utf8"), fromFile, regenerate);
});
