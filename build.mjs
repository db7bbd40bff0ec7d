// Builds the plugins from one set of esbuild bundles, in two forms:
//
//   node build.mjs               bin/<plugin>: small scripts for hosts with Node.js 20+
//   node build.mjs --standalone  the same, and dist/bin/<plugin>: one standalone
//                                executable (a Node single executable application,
//                                no Node.js needed on the host) hard-linked under
//                                every plugin name
//
// Every CNI call is a fresh process, and V8 parses every function in the file
// it loads, run or not. So:
// - the operator CLI (commander, and for vxlan-flannel the daemon with its
//   etcd/grpc client) is bundled separately and embedded as a string, compiled
//   only when the executable runs as a CLI: a CNI call parses just plugin code;
// - each plugin bundle is held as a string (in the script, or as an asset of
//   the standalone executable) and compiled by src/boot/code-cache.ts with a
//   V8 code cache.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brotliCompressSync, constants as zlib } from 'node:zlib';
import { buildId, scriptStamp, stampStandalone } from './build-stamp.mjs';

const BUNDLES = ['host-local', 'bridge', 'vxlan-flannel'];
/** Executable name -> bundle: `flannel` is vxlan-flannel under the name of flannel's own CNI plugin. */
const EXECUTABLES = { 'host-local': 'host-local', bridge: 'bridge', 'vxlan-flannel': 'vxlan-flannel', flannel: 'vxlan-flannel' };
const standalone = process.argv.includes('--standalone');
const version = JSON.stringify(JSON.parse(readFileSync('package.json', 'utf8')).version);

/**
 * Node's built-in modules as ES modules. esbuild compiles `import * as fs
 * from 'node:fs'` in its CommonJS output to a copy of every property of the
 * module (__toESM), once per importing file: a dozen copies of node:fs cost
 * ~0.5 ms on every plugin call (measured with --cpu-prof). Through this facade,
 * which re-exports each builtin's plain properties, `fs.readFileSync` compiles
 * to a direct reference. Accessor properties (fs.promises, which loads
 * streams) are left out: using one fails the build instead of slowing it.
 */
const builtinFacades = {
  name: 'builtin-facades',
  setup(b) {
    const load = createRequire(import.meta.url);
    // Only ES imports: a CommonJS require() (in bundled libraries) gets the module itself, as it expects.
    b.onResolve({ filter: /^node:/ }, ({ path, namespace, kind }) =>
      namespace === 'builtin' || kind !== 'import-statement' ? { path, external: true } : { path, namespace: 'builtin' },
    );
    b.onLoad({ filter: /.*/, namespace: 'builtin' }, ({ path }) => {
      const mod = load(path);
      const names = Object.keys(mod).filter((k) => /^[A-Za-z_$][\w$]*$/.test(k) && k !== 'default' && 'value' in Object.getOwnPropertyDescriptor(mod, k));
      const lines = names.map((k) => `export const ${k} = m.${k};`);
      return { contents: `const m = require(${JSON.stringify(path)});\nexport default m;\n${lines.join('\n')}\n`, loader: 'js' };
    });
  },
};

const common = {
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  minify: true,
  legalComments: 'none',
  logLevel: 'warning',
  write: false,
  plugins: [builtinFacades],
};

const bundle = async (entry, define) => (await build({ ...common, entryPoints: [entry], define })).outputFiles[0].text;
const hash = (text) => createHash('sha256').update(text).digest('hex').slice(0, 16);

/**
 * The plugin bundle of `name` (src/cmd/<name>.ts) with its CLI (src/cli/<name>.ts)
 * inside as a string, brotli-compressed and base64-encoded: every CNI call reads
 * and scans the whole executable, and a string literal costs by its length
 * (host-local's CLI with the CRI client for `repair` is ~460 KB, ~170 KB so).
 */
async function pluginBundle(name) {
  const cli = await bundle(`src/cli/${name}.ts`, { __VERSION__: version });
  const packed = brotliCompressSync(cli, { params: { [zlib.BROTLI_PARAM_QUALITY]: 9 } }).toString('base64');
  return bundle(`src/cmd/${name}.ts`, { __VERSION__: version, __CLI_SOURCE__: JSON.stringify(packed) });
}

function writeExecutable(file, text) {
  writeFileSync(file, text);
  chmodSync(file, 0o755);
}

const payloads = Object.fromEntries(await Promise.all(BUNDLES.map(async (b) => [b, await pluginBundle(b)])));
const id = buildId(version, payloads);

// bin/<plugin>: `#!/usr/bin/env node` and a loader with the bundle inside.
mkdirSync('bin', { recursive: true });
for (const [exe, b] of Object.entries(EXECUTABLES)) {
  const define = { __PAYLOAD__: JSON.stringify(payloads[b]), __PAYLOAD_ID__: JSON.stringify(`${b}-${hash(payloads[b])}`) };
  writeExecutable(`bin/${exe}`, '#!/usr/bin/env node\n' + scriptStamp(id, b) + (await bundle('src/boot/script.ts', define)));
}

if (standalone) await buildStandalone();

/**
 * dist/bin/<plugin>: the Node binary running this build, with a SEA blob
 * injected (https://nodejs.org/api/single-executable-applications.html): the
 * multi-call main script (src/boot/standalone.ts) and each plugin bundle as an
 * asset. The blob's code cache (`useCodeCache`) and a V8 startup snapshot
 * (`useSnapshot`) both measured slower than our own code cache, which the
 * main script uses as the scripts do (docs/speed.md).
 */
async function buildStandalone() {
  checkNodeForStandalone();
  const work = mkdtempSync(join(tmpdir(), 'cni-ts-sea-'));
  try {
    const assets = {};
    const bundles = {};
    for (const b of BUNDLES) {
      assets[b] = join(work, `${b}.js`);
      writeFileSync(assets[b], payloads[b]);
    }
    for (const [exe, b] of Object.entries(EXECUTABLES)) bundles[exe] = [b, `${b}.sea-${hash(payloads[b])}`];
    const main = join(work, 'main.js');
    writeFileSync(main, await bundle('src/boot/standalone.ts', { __BUNDLES__: JSON.stringify(bundles) }));
    const blob = join(work, 'sea.blob');
    const config = join(work, 'sea-config.json');
    writeFileSync(config, JSON.stringify({ main, output: blob, disableExperimentalSEAWarning: true, assets }));
    quiet(process.execPath, ['--experimental-sea-config', config]);

    rmSync('dist/bin', { recursive: true, force: true });
    mkdirSync('dist/bin', { recursive: true });
    const [first, ...others] = Object.keys(EXECUTABLES);
    const exe = join('dist/bin', first);
    copyFileSync(process.execPath, exe);
    chmodSync(exe, 0o755);
    // postject's ELF writer (LIEF) prints harmless warnings about note sections: shown only on failure.
    quiet(process.execPath, ['node_modules/postject/dist/cli.js', exe, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2']);
    stampStandalone(exe, id);
    for (const name of others) linkSync(exe, join('dist/bin', name));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Runs a build step, printing its output only when it fails. */
function quiet(file, args) {
  const r = spawnSync(file, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${file} ${args.join(' ')} failed:\n${r.stdout}${r.stderr}`);
}

/**
 * The standalone executable is this very `node` binary: it must support SEA
 * assets (20.12+) and must not need shared libraries a node without Node.js
 * lacks (Debian's own nodejs links libnode, libuv, ICU, OpenSSL ...).
 */
function checkNodeForStandalone() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major < 20 || (major === 20 && minor < 12)) throw new Error(`standalone build: Node.js ${process.version} is too old (20.12+ embeds assets)`);
  const base = /^(linux-vdso|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[\w-]*)\.so/;
  const libs = execFileSync('ldd', [process.execPath], { encoding: 'utf8' })
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0])
    .filter((l) => l && !base.test(l.split('/').pop()));
  if (libs.length) {
    throw new Error(
      `standalone build: ${process.execPath} needs shared libraries a plain node does not have (${libs.join(', ')}); ` +
        'build with an official Node.js release binary (nodejs.org or NodeSource), which links only libc and libstdc++',
    );
  }
}
