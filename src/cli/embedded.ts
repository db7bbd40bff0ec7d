// Runs the operator CLI that build.mjs embedded beside the plugin bundle (see
// there for why): in a script, a string in this bundle, brotli-compressed; in
// the standalone executable, an asset of its own, read only then (no zlib).
// The CLI's chunks (the etcd client, YAML) are compiled only when the CLI
// requires them: a daemon never compiles the code of a lease source it does
// not use.
import { compileFunction } from 'node:vm';

/** Script: the packed CLI; standalone: ''. */
declare const __CLI_SOURCE__: string;
/** Script: the packed chunks by name; standalone: none. */
declare const __CLI_CHUNKS__: Record<string, string>;
/** Standalone: the asset names' prefix (the bundle's name; its chunks are "<prefix>.cli.<chunk>"); script: ''. */
declare const __CLI_ASSET__: string;

interface CliModule {
  main(argv: string[]): Promise<void>;
}

/** What the CLI's bundle requires to get chunk NAME (build.mjs). */
export const CHUNK_PREFIX = 'cni-ts-chunk:';

/** The source of the CLI (no name) or one of its chunks. */
function sourceOf(chunk?: string): string {
  const asset = typeof __CLI_ASSET__ === 'string' ? __CLI_ASSET__ : '';
  if (asset) return (require('node:sea') as typeof import('node:sea')).getAsset(`${asset}.cli${chunk ? `.${chunk}` : ''}`, 'utf8');
  const packed = chunk === undefined ? (typeof __CLI_SOURCE__ === 'string' ? __CLI_SOURCE__ : '') : typeof __CLI_CHUNKS__ === 'object' ? __CLI_CHUNKS__[chunk] : undefined;
  if (!packed) throw new Error(chunk ? `this build has no ${chunk} chunk` : 'this build has no command line interface');
  // brotli + base64 (see build.mjs); zlib is loaded only here, never on a CNI call
  // (require: code compiled by node:vm, as this bundle is, cannot import())
  const { brotliDecompressSync } = require('node:zlib') as typeof import('node:zlib');
  return brotliDecompressSync(Buffer.from(packed, 'base64')).toString('utf8');
}

const chunks = new Map<string, unknown>();

/** `require` for the CLI's code: its chunks by name, anything else as this bundle requires it. */
function requireInCli(id: string): unknown {
  if (!id.startsWith(CHUNK_PREFIX)) return require(id);
  const name = id.slice(CHUNK_PREFIX.length);
  if (!chunks.has(name)) chunks.set(name, evaluate(sourceOf(name)));
  return chunks.get(name);
}

/** Compiles and runs CommonJS `source`; its exports. */
function evaluate(source: string): unknown {
  const module = { exports: {} as unknown };
  // The same wrapper arguments as a CommonJS module: bundled libraries may use __dirname.
  compileFunction(source, ['module', 'exports', 'require', '__filename', '__dirname'], { filename: __filename })(
    module,
    module.exports,
    requireInCli,
    __filename,
    __dirname,
  );
  return module.exports;
}

/** Compiles and runs the embedded CLI bundle with this process's argv. */
export async function runEmbeddedCli(argv: string[]): Promise<void> {
  await (evaluate(sourceOf()) as Partial<CliModule>).main!(argv);
}
