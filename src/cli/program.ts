// The frame every plugin's command line shares: name, version, help, and one-line errors.
import { Command } from 'commander';
import { SUPPORTED_VERSIONS } from '../cni/version';

declare const __VERSION__: string;
export const VERSION = typeof __VERSION__ === 'string' ? __VERSION__ : 'dev';

export function baseProgram(name: string, description: string): Command {
  return new Command(name)
    .description(
      `${description}\n\nRun by a container runtime with CNI_COMMAND set, this is a CNI plugin ` +
        `(spec ${SUPPORTED_VERSIONS.join(', ')}); without it, these commands are for operators.`,
    )
    .version(VERSION, '--version') // not -v: that is klog's verbosity on `vxlan-flannel daemon -v=2`
    .showHelpAfterError();
}

/** Runs a commander program, turning thrown errors into one line on stderr and exit 1. */
export async function runProgram(program: Command, argv: string[]): Promise<void> {
  try {
    await program.parseAsync(argv);
  } catch (err) {
    process.stderr.write(`${program.name()}: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}
