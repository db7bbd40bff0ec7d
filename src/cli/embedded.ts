// Runs the operator CLI that build.mjs embedded as a string (see there for why).
import { compileFunction } from 'node:vm';

declare const __CLI_SOURCE__: string;

interface CliModule {
  main(argv: string[]): Promise<void>;
}

/** Compiles and runs the embedded CLI bundle with this process's argv. */
export async function runEmbeddedCli(argv: string[]): Promise<void> {
  const packed = typeof __CLI_SOURCE__ === 'string' ? __CLI_SOURCE__ : '';
  if (!packed) throw new Error('this build has no command line interface');
  // brotli + base64 (see build.mjs); zlib is loaded only here, never on a CNI call
  // (require: code compiled by node:vm, as this bundle is, cannot import())
  const { brotliDecompressSync } = require('node:zlib') as typeof import('node:zlib');
  const source = brotliDecompressSync(Buffer.from(packed, 'base64')).toString('utf8');
  const module = { exports: {} as Partial<CliModule> };
  // The same wrapper arguments as a CommonJS module: bundled libraries may use __dirname.
  compileFunction(source, ['module', 'exports', 'require', '__filename', '__dirname'], { filename: __filename })(
    module,
    module.exports,
    require,
    __filename,
    __dirname,
  );
  await module.exports.main!(argv);
}
