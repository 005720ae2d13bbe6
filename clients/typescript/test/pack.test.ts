// What a user installs is what was tested: `npm pack` of the package installs
// into a fresh folder (no network: the package has no dependency) and imports.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

const pkgDir = new URL("../..", import.meta.url).pathname;
const npm = (args: string[], cwd: string) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

test("npm pack installs into a fresh folder and imports", async () => {
  const dir = await mkdtemp(join(tmpdir(), "lineage-pack-"));
  try {
    // dist/ is already built by `npm test`; --ignore-scripts skips building it again.
    const packed = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", dir], pkgDir))[0];
    const tgz = join(dir, packed.filename);
    console.log(`# package: ${packed.filename}, ${(await stat(tgz)).size} bytes packed, ${packed.unpackedSize} bytes unpacked, ${packed.entryCount} files`);
    assert.ok(packed.files.every((f: { path: string }) => /^(package\.json|README\.md|LICENSE|dist\/src\/)/.test(f.path)), "only the build and the package's own files");
    const app = join(dir, "app");
    execFileSync("mkdir", ["-p", app]);
    await writeFile(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    npm(["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", tgz], app);
    const out = execFileSync(
      "node",
      [
        "--input-type=module",
        "-e",
        `import { Guard, Denied, PendingTimeout, GuardUnavailable, verdictText } from "@lineage-guard/client";
         import { guardTools, terminated } from "@lineage-guard/client/ai-sdk";
         import { guardTool } from "@lineage-guard/client/openai-agents";
         const g = new Guard({ url: "http://127.0.0.1:9", token: "t" });
         console.log([typeof Guard, typeof Denied, typeof PendingTimeout, typeof GuardUnavailable, typeof verdictText, typeof guardTools, typeof terminated, typeof guardTool, g.url].join(" "));
         await import("@lineage-guard/client/langchain").then(() => console.log("langchain loaded"), (e) => console.log("langchain:", e.code));`,
      ],
      { cwd: app, encoding: "utf8" },
    );
    assert.equal(
      out.trim(),
      "function function function function function function function function http://127.0.0.1:9\nlangchain: ERR_MODULE_NOT_FOUND",
      "the core and the adapters without runtime imports load; the langchain adapter needs its (optional) peer",
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
