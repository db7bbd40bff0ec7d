// Runs the operator CLI that build.mjs embedded as a string (see there for why).
import { compileFunction } from 'node:vm';

declare const __CLI_SOURCE__: string;

interface CliModule {
  main(argv: string[]): Promise<void>;
}

/** Compiles and runs the embedded CLI bundle with this process's argv. */
export async function runEmbeddedCli(argv: string[]): Promise<void> {
  const source = typeof __CLI_SOURCE__ === 'string' ? __CLI_SOURCE__ : '';
  if (!source) throw new Error('this build has no command line interface');
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
