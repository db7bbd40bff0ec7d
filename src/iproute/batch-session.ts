// `ip -force -batch -` and `bridge -force -batch -` kept running for a
// long-lived process (the flannel daemon): each batch is written to the same
// child's stdin instead of forking a process per batch. A change of one peer
// costs one to three batches; from a daemon holding ~90 MiB, each fork and
// exec cost 2-3 ms of wall time and 1-2 ms of CPU, most of a change.
//
// How a batch's end is seen: after its lines comes one that always fails the
// same way and changes nothing (an unknown object): the tool reports every
// failed line on stderr, unbuffered, as "<why>\nCommand failed -:<N>" with N
// counted from its start, so the batch is done when the marker line's own
// report arrives, and the reports before it are the batch's lines'. They are
// handed back renumbered from 1, as a process of its own would report them
// (batch.ts parses them). Nothing goes to stdout: only lines that print
// nothing are sent this way (no -json, no show).
//
// A child that ends (killed, or a tool exiting on a line it cannot parse)
// fails the batch in flight; the next batch starts a new child.
//
// iproute2 caches each device's index by name for the life of the process: a
// device deleted and made again (the VTEP, by us or by hand) would be sent to
// its old index for good ("unknown ifindex", "Device not found"). So the
// children are ended whenever a link is added, deleted or renamed through this
// runner (such a command or batch runs in a process of its own), and a child whose batch failed that way is ended after it (the pass
// that failed is retried, in a new child).
//
// iproute2 6.1 keeps ~3-4 KiB per batch line until it exits (measured: 40 MiB
// in an ip that took a full pass of 10,000 lines, 20 MiB in its bridge): a
// kept child is ended after RECYCLE_LINES lines, and a batch of more than
// SESSION_LINES lines (a full pass, the start) runs in a process of its own,
// whose fork is then worth little next to its work.
import type { RunResult, Runner } from './exec';

/** The line after each batch: an object neither tool knows, which changes nothing. */
const MARKER = 'cni-ts-batch-end';
/** Batches of more lines run in a process of their own. */
const SESSION_LINES = 64;
/** A kept child is ended once it has taken this many lines (what iproute2 keeps per line stays bounded). */
const RECYCLE_LINES = 512;
/** A line failed on a device index the child may have cached before the device was made again. */
const STALE_DEVICE = /unknown ifindex|Device not found|No such device|Cannot find device/;

interface Pending {
  /** The line number (counted by the child) of this batch's first line. */
  first: number;
  /** The marker's line number. */
  marker: number;
  resolve(r: RunResult): void;
  reject(err: Error): void;
}

class Session {
  private child?: import('node:child_process').ChildProcess;
  /** Lines written to the current child so far. */
  private written = 0;
  private stderr = '';
  private pending?: Pending;
  /** Batches run one at a time. */
  private tail: Promise<unknown> = Promise.resolve();

  constructor(private readonly program: 'ip' | 'bridge') {}

  run(input: string): Promise<RunResult> {
    const next = this.tail.then(() => this.send(input));
    this.tail = next.catch(() => {});
    return next;
  }

  private start(): import('node:child_process').ChildProcess {
    const { spawn } = require('node:child_process') as typeof import('node:child_process');
    const child = spawn(this.program, ['-force', '-batch', '-'], { stdio: ['pipe', 'ignore', 'pipe'] });
    this.written = 0;
    this.stderr = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (text: string) => {
      this.stderr += text;
      this.settle();
    });
    child.stdin!.on('error', () => {}); // a child gone: its exit says so
    child.on('error', (err) => this.lost(child, `${this.program} -batch could not run: ${err.message}`));
    child.on('exit', (code, signal) => this.lost(child, `${this.program} -batch exited (${signal ?? `status ${code}`}) during a batch: ${this.stderr.trim().split('\n').slice(-2).join('; ')}`));
    return child;
  }

  private send(input: string): Promise<RunResult> {
    const lines = input.split('\n').filter((l) => l.trim() !== '');
    if (lines.length === 0) return Promise.resolve({ stdout: '', stderr: '', code: 0 });
    if (this.child && this.written >= RECYCLE_LINES) this.close();
    const child = (this.child ??= this.start());
    const first = this.written + 1;
    this.written += lines.length + 1;
    return new Promise((resolve, reject) => {
      this.pending = { first, marker: this.written, resolve, reject };
      child.stdin!.write(`${lines.join('\n')}\n${MARKER}\n`);
    });
  }

  /** The batch in flight ends once the marker's report is in. */
  private settle(): void {
    const p = this.pending;
    if (!p) return;
    const markerAt = this.stderr.indexOf(`Command failed -:${p.marker}\n`);
    if (markerAt < 0) return;
    // the marker's own report is the last one: its message comes before it, after the previous report
    const before = this.stderr.slice(0, markerAt);
    const ownStart = before.lastIndexOf('Command failed -:');
    const reports = ownStart < 0 ? '' : before.slice(0, before.indexOf('\n', ownStart) + 1);
    this.stderr = this.stderr.slice(markerAt + `Command failed -:${p.marker}\n`.length);
    this.pending = undefined;
    // renumbered from 1, as if this batch had been a process of its own
    const stderr = reports.replace(/Command failed -:(\d+)/g, (_, n: string) => `Command failed -:${Number(n) - p.first + 1}`);
    if (STALE_DEVICE.test(stderr)) this.close();
    p.resolve({ stdout: '', stderr, code: stderr ? 1 : 0 });
  }

  private lost(child: import('node:child_process').ChildProcess, why: string): void {
    if (child !== this.child) return;
    this.child = undefined;
    const p = this.pending;
    this.pending = undefined;
    p?.reject(new Error(why));
  }

  /** Ends the child once it has done what it was sent (a batch in flight still settles). */
  close(): void {
    this.child?.stdin?.end();
    this.child = undefined;
  }
}

/** Lines of a batch's input, counted up to one more than a session takes. */
function lineCount(input: string): number {
  let n = 0;
  for (let at = input.indexOf('\n'); at >= 0 && n <= SESSION_LINES; at = input.indexOf('\n', at + 1)) n++;
  return n;
}

/** `link add|del|delete ...` or `link set ... name NEW`: a device's index may now belong to another name. */
function changesLinks(args: readonly string[]): boolean {
  if (args[0] !== 'link') return false;
  return args[1] === 'add' || args[1] === 'del' || args[1] === 'delete' || (args[1] === 'set' && args.includes('name'));
}

/** An `ip` command, or a line of its batch, that adds, deletes or renames a device. */
function changesDevices(argv: readonly string[], input: string | undefined): boolean {
  if (argv[0] !== 'ip') return false;
  if (changesLinks(argv.slice(1))) return true;
  return !!input && argv.includes('-batch') && input.split('\n').some((line) => changesLinks(line.trim().split(/\s+/)));
}

/**
 * A Runner that sends `ip -force -batch -` and `bridge -force -batch -` of
 * this namespace (no -json, -details, -n) of at most SESSION_LINES lines to a
 * kept child each, and every other command to `fallback`. A command that
 * adds, deletes or renames a device runs in a process of its own, and the
 * children are ended after it. `close` ends the children.
 */
export function batchSessions(fallback: Runner): { runner: Runner; close(): void } {
  const sessions = { ip: new Session('ip'), bridge: new Session('bridge') };
  const close = () => Object.values(sessions).forEach((s) => s.close());
  const runner: Runner = (argv, input) => {
    if (changesDevices(argv, input)) return fallback(argv, input).finally(close);
    const [program, ...flags] = argv;
    const kept = (program === 'ip' || program === 'bridge') && flags.join(' ') === '-force -batch -' && lineCount(input ?? '') <= SESSION_LINES;
    return kept ? sessions[program as 'ip' | 'bridge'].run(input ?? '') : fallback(argv, input);
  };
  return { runner, close };
}
