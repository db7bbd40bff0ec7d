// Third-party notices for what the standalone executables hold: the Node.js
// runtime they embed (its package's LICENSE, which covers Node's own
// dependencies) and every npm package esbuild bundled into the plugins'
// code, each with its license text (and NOTICE, where it has one). Made at
// build time from the bundles' metafiles (build.mjs): no list is kept by hand,
// so a dependency added or dropped changes the notices with it.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** The package directories (…/node_modules/<name> or …/node_modules/@scope/<name>) the bundled files come from. */
export function bundledPackageDirs(inputs) {
  const dirs = new Set();
  for (const input of inputs) {
    // the innermost node_modules: a nested copy is a package of its own
    const m = /^(?:.*\/)?node_modules\/(?:@[^/]+\/)?[^/]+(?=\/)/.exec(input);
    if (m) dirs.add(m[0]);
  }
  return [...dirs].sort();
}

const LICENSE_FILE = /^(licen[cs]e|copying)(\.(md|txt|markdown))?$/i;
const NOTICE_FILE = /^notice(\.(md|txt))?$/i;

/** A package's name, version, declared license and the text of its license (and NOTICE) files. */
export function packageNotice(dir) {
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const files = readdirSync(dir).sort();
  const license = files.filter((f) => LICENSE_FILE.test(f));
  if (!license.length) throw new Error(`notices: ${pkg.name} ${pkg.version} (${dir}) has no license file: its notice cannot be made`);
  const texts = [...license, ...files.filter((f) => NOTICE_FILE.test(f))].map((f) => readFileSync(join(dir, f), 'utf8').trim());
  const declared = typeof pkg.license === 'string' ? pkg.license : (pkg.license?.type ?? 'see the text');
  return { name: pkg.name, version: pkg.version, license: declared, text: texts.join('\n\n') };
}

const RULE = '='.repeat(78);
const entry = (title, text) => `${RULE}\n${title}\n${'-'.repeat(78)}\n${text}\n`;

/**
 * The notices file: `runtimeDir` is the Node.js package the executables
 * embed (runtime/node_modules/node-linux-<arch>), `inputs` the bundles'
 * metafile inputs.
 */
export function thirdPartyNotices({ project, version, runtimeDir, inputs }) {
  const node = JSON.parse(readFileSync(join(runtimeDir, 'package.json'), 'utf8'));
  const nodeLicense = join(runtimeDir, 'LICENSE');
  if (!existsSync(nodeLicense)) throw new Error(`notices: ${nodeLicense} is missing`);
  const seen = new Set();
  const packages = [];
  for (const dir of bundledPackageDirs(inputs)) {
    const n = packageNotice(dir);
    if (seen.has(`${n.name}@${n.version}`)) continue;
    seen.add(`${n.name}@${n.version}`);
    packages.push(n);
  }
  packages.sort((a, b) => a.name.localeCompare(b.name) || a.version.localeCompare(b.version));
  const head =
    `${project} ${version}: third-party software in its executables\n\n` +
    `${project} itself is licensed under the Apache License 2.0 (LICENSE). Its standalone executables are\n` +
    `Node.js ${node.version} (the ${node.name} package) with the plugins' code inside, which bundles the\n` +
    `npm packages listed below. Each follows with its license.\n\n` +
    `Node.js ${node.version}\n${packages.map((p) => `${p.name} ${p.version} (${p.license})`).join('\n')}\n`;
  return [
    head,
    entry(
      `Node.js ${node.version} (${node.name}; its LICENSE, which covers the software Node.js includes)`,
      readFileSync(nodeLicense, 'utf8').trim(),
    ),
    ...packages.map((p) => entry(`${p.name} ${p.version} (${p.license})`, p.text)),
  ].join('\n');
}
