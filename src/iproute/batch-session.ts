// One `ip -json -force -batch -` process fed in steps: `ip` reads its batch
// from stdin a line at a time and flushes each JSON answer as it goes, so the
// caller can send a few lines, read what they printed, and only then decide
// what to send next, all in the same process. The bridge uses this to read
// an existing link's kind before it changes anything on it, without paying
// for a second `ip` process.
//
// A step ends with a sentinel line that always fails (`link show dev .`: no
// link can be named "."). Its "Command failed" marker on stderr means every
// line before it has run and printed its error, if any (stderr is one ordered
// stream); the step is complete once stdout also holds the JSON of every
// query line that did not fail.
//
// When a test or caller installed its own runner (setRunner), there is no
// process to stream to: each step then runs as a batch of its own through
// that runner (same lines, same results, one call per step).
import { spawn, type ChildProcess } from 'node:child_process';
import { inNetns, setRunner, spawnRunner } from './exec';
import { syncRunner } from './sync-runner';
import { BatchProcessError, checkBatchWords, isQuery, parseFailures, runBatch, splitJson, type BatchOptions, type BatchResult, type Line } from './batch';

export interface BatchSession {
  /** Runs `lines` and resolves once every one of them has run, with their errors and query outputs. */
  run(lines: readonly Line[]): Promise<BatchResult>;
  /** Runs the last `lines` (possibly none), ends the input and waits for the process to exit. */
  finish(lines?: readonly Line[]): Promise<BatchResult>;
  /** Ends the session if finish() was not called (nothing more runs) and waits for the process; never fails. */
  close(): Promise<void>;
}

/**
 * Opens an `ip -json` batch session (in `opts.netns` when given). The process
 * starts at once, so its start-up overlaps whatever the caller does before
 * the first step; every session must end with finish() or close().
 */
export function openIpBatch(opts: Omit<BatchOptions, 'json'> = {}): BatchSession {
  const o = { ...opts, json: true };
  return commandsRunForReal() ? new StreamSession(o) : new StepSession(o);
}

/** True when exec() runs real processes (its own runner or syncRunner), not a runner a test installed. */
function commandsRunForReal(): boolean {
  // setRunner hands back the runner in use; put it straight back.
  const current = setRunner(spawnRunner);
  setRunner(current);
  return current === spawnRunner || current === syncRunner;
}

const SENTINEL: Line = ['link', 'show', 'dev', '.'];

/** Each step is a batch process of its own, through the installed runner. */
class StepSession implements BatchSession {
  constructor(private readonly opts: BatchOptions) {}

  run(lines: readonly Line[]): Promise<BatchResult> {
    return runBatch('ip', lines, this.opts);
  }

  async finish(lines: readonly Line[] = []): Promise<BatchResult> {
    return runBatch('ip', lines, this.opts);
  }

  async close(): Promise<void> {}
}

interface Sent {
  /** The line's number in the process's input (sentinels take numbers too). */
  no: number;
  line: Line;
}

class StreamSession implements BatchSession {
  private readonly argv: string[];
  private readonly child: ChildProcess;
  private out = '';
  private err = '';
  private sent: Sent[] = [];
  private inputLines = 0;
  private ended = false;
  private exit?: { code: number } | { error: Error };
  private readonly waiters = new Set<() => void>();

  constructor(private readonly opts: BatchOptions) {
    this.argv = inNetns(['ip', '-json', ...(opts.details ? ['-details'] : []), '-force', '-batch', '-'], opts.netns);
    const child = spawn(this.argv[0], this.argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    child.stdout!.on('data', (b: Buffer) => {
      this.out += b.toString();
      this.wake();
    });
    child.stderr!.on('data', (b: Buffer) => {
      this.err += b.toString();
      this.wake();
    });
    child.on('error', (error) => {
      this.exit ??= { error };
      this.wake();
    });
    child.on('close', (code) => {
      this.exit ??= { code: code ?? 128 }; // killed by a signal
      this.wake();
    });
    child.stdin!.on('error', () => {}); // ip may exit without reading everything
  }

  async run(lines: readonly Line[]): Promise<BatchResult> {
    const mine = this.send(lines, false);
    const sentinel = this.inputLines;
    await this.until(() => {
      if (!parseFailures(this.err).has(sentinel)) return false;
      return splitJson(this.out, { partial: true }).length >= this.expectedOutputs();
    });
    return this.result(mine);
  }

  async finish(lines: readonly Line[] = []): Promise<BatchResult> {
    const mine = this.send(lines, true);
    await this.untilExit();
    const exit = this.exit!;
    if ('error' in exit) throw exit.error;
    const run = { stdout: this.out, stderr: this.err, code: exit.code };
    // -force exits 1 when a line failed (every run() step has one: its sentinel).
    if (exit.code !== 0 && (exit.code !== 1 || parseFailures(this.err).size === 0)) throw new BatchProcessError(this.argv, run, this.opts.netns);
    return this.result(mine);
  }

  async close(): Promise<void> {
    if (!this.ended) {
      this.ended = true;
      this.child.stdin!.end();
    }
    await this.untilExit();
  }

  /** Writes `lines` (and a sentinel, or the end of input); returns their records. */
  private send(lines: readonly Line[], last: boolean): Sent[] {
    if (this.ended) throw new Error('ip batch session already finished');
    checkBatchWords('ip', lines);
    if (this.exit) throw this.exited();
    const mine = lines.map((line) => ({ no: ++this.inputLines, line }));
    this.sent.push(...mine);
    const text = lines.map((l) => l.join(' ') + '\n').join('');
    if (last) {
      this.ended = true;
      this.child.stdin!.end(text);
    } else {
      this.inputLines++;
      this.child.stdin!.write(text + SENTINEL.join(' ') + '\n');
    }
    return mine;
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }

  /** Resolves when `done()` holds; rejects if the process exits first. */
  private until(done: () => boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (done()) resolve();
        else if (this.exit) reject(this.exited());
        else return;
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  private untilExit(): Promise<void> {
    return this.until(() => this.exit !== undefined);
  }

  private exited(): Error {
    const exit = this.exit!;
    if ('error' in exit) return exit.error;
    return new BatchProcessError(this.argv, { stdout: this.out, stderr: this.err, code: exit.code }, this.opts.netns);
  }

  /** Query lines sent so far that did not fail: the JSON values stdout must hold. */
  private expectedOutputs(): number {
    const failed = parseFailures(this.err);
    return this.sent.filter((s) => isQuery(s.line) && !failed.has(s.no)).length;
  }

  private result(mine: Sent[]): BatchResult {
    const failed = parseFailures(this.err);
    const values = splitJson(this.out, { partial: true });
    const outputs = new Map<number, unknown>();
    let next = 0;
    for (const s of this.sent) if (isQuery(s.line) && !failed.has(s.no)) outputs.set(s.no, values[next++]);
    const errors = mine.map((s) => (failed.has(s.no) ? failed.get(s.no) || 'failed' : undefined));
    return { errors, outputs: mine.map((s) => outputs.get(s.no)), firstError: errors.findIndex((e) => e !== undefined) };
  }
}
