// Batched `ip` / `bridge` calls that report per line: one process runs many
// commands with `-force -batch -`, so a failing line (a bridge that already
// exists, a link that is already gone) does not stop the rest, and the caller
// decides line by line which failures matter. Query lines (`... show ...`)
// produce JSON with `json: true`, returned in line order.
//
// iproute2 6.1 quirk: in one batch, `addr show` after `link show` loses its
// `addr_info`. Read links with `addr show dev X` (see link.ts `showDev`): it
// prints everything `link show` does plus the addresses.
import { exec, type RunResult } from './exec';
import { ipCannotEnterNetns, ipNetnsName } from './netns';
import { setSysctlsIn, sysctlArgv, type SysctlKey } from './sysctl';

export type Line = readonly string[];

export interface BatchOptions {
  /**
   * Network namespace path to run in; the caller's own namespace when absent.
   * `ip` enters a named namespace itself (`ip -n NAME`), any other with nsenter.
   */
  netns?: string;
  /** `-json`: query lines return parsed JSON. */
  json?: boolean;
  /** `-details` (link kind, bridge and bridge-port attributes). */
  details?: boolean;
  /**
   * Sysctls of `netns`, set before the lines run (`ip` only). In a named
   * namespace they are the batch's own first line, `netns exec NAME sysctl
   * ...` (ip forks sysctl in the namespace: no process of ours); elsewhere a
   * process before the batch. A batch with sysctls stops at its first
   * failing line (lines after it are reported as not run): without that, a
   * forked ip that failed to enter the namespace would run the rest of the
   * batch itself. A sysctl that cannot be set throws.
   */
  sysctls?: ReadonlyArray<readonly [SysctlKey, string]>;
}

export interface BatchResult {
  /** Per line: the error text when the line failed, otherwise undefined. */
  errors: (string | undefined)[];
  /** Per line: the JSON a successful query line printed (json mode), otherwise undefined. */
  outputs: unknown[];
  /** Index of the first failed line, or -1. */
  firstError: number;
}

/** Words `ip -batch` would split, unquote or cut (it drops everything after '#'). */
const UNSAFE_WORD = /[\s"'\\#\x00-\x1f\x7f]/; // control characters: -batch ends a line at NUL

export class UnsafeWordError extends Error {
  constructor(
    readonly program: string,
    readonly word: string,
  ) {
    super(`${program} -batch cannot carry the word ${JSON.stringify(word)}`);
    this.name = 'UnsafeWordError';
  }
}

/** True when every word of `line` passes through `-batch` unchanged. */
export function isBatchSafe(line: Line): boolean {
  return line.every((w) => w !== '' && !UNSAFE_WORD.test(w));
}

/** Throws UnsafeWordError for the first word of `lines` that -batch would mangle. */
function checkBatchWords(program: string, lines: readonly Line[]): void {
  for (const line of lines) {
    for (const word of line) if (word === '' || UNSAFE_WORD.test(word)) throw new UnsafeWordError(program, word);
  }
}

/** A query line prints output: `<object> show|list|get ...` (and `vlan show` for bridge). */
function isQuery(line: Line): boolean {
  return line[1] === 'show' || line[1] === 'list' || line[1] === 'get' || line[1] === 'lst';
}

/**
 * Runs `lines` in one `ip` (or `bridge`) process with -force (but see
 * `sysctls`). Never throws for a failing line: see `errors`. Throws when the
 * process itself fails (cannot enter the namespace, killed, unparsable output).
 */
export async function runBatch(program: 'ip' | 'bridge', lines: readonly Line[], opts: BatchOptions = {}): Promise<BatchResult> {
  const result: BatchResult = { errors: lines.map(() => undefined), outputs: lines.map(() => undefined), firstError: -1 };
  const sysctls = opts.sysctls?.length ? opts.sysctls : undefined;
  if (lines.length === 0 && !sysctls) return result;
  if (sysctls && (program !== 'ip' || !opts.netns)) throw new Error('runBatch: sysctls need ip and a namespace');
  checkBatchWords(program, lines);
  const { run, argv, sent } = await runProcess(program, lines, opts, sysctls);

  const failed = parseFailures(run.stderr);
  if (run.code !== 0 && failed.size === 0) {
    throw new BatchProcessError(argv, run, opts.netns);
  }
  const offset = sent.length - lines.length; // the sysctl line, when it went first
  if (offset && failed.has(1)) throw new LineError(program, sent[0], failed.get(1) || 'failed');
  for (const [lineNo, msg] of failed) {
    const i = lineNo - 1 - offset;
    if (i >= 0 && i < lines.length) result.errors[i] = msg || 'failed';
  }
  result.firstError = result.errors.findIndex((e) => e !== undefined);
  if (sysctls && result.firstError >= 0) {
    for (let i = result.firstError + 1; i < lines.length; i++) result.errors[i] = `not run: line ${result.firstError + 1} failed`;
  }
  if (opts.json) {
    const values = splitJson(run.stdout);
    let next = 0;
    lines.forEach((line, i) => {
      if (isQuery(line) && result.errors[i] === undefined) result.outputs[i] = values[next++];
    });
  }
  return result;
}

/**
 * The batch's process: `ip -n NAME` with the sysctl line first when ip can
 * enter the namespace by name, else the sysctls' own process and the batch
 * through nsenter (exec.ts). Returns what ran and the lines it was given.
 */
async function runProcess(
  program: 'ip' | 'bridge',
  lines: readonly Line[],
  opts: BatchOptions,
  sysctls: BatchOptions['sysctls'],
): Promise<{ run: RunResult; argv: string[]; sent: readonly Line[] }> {
  const flags = [...(opts.json ? ['-json'] : []), ...(opts.details ? ['-details'] : []), ...(sysctls ? [] : ['-force']), '-batch', '-'];
  const text = (ls: readonly Line[]) => ls.map((l) => l.join(' ')).join('\n') + '\n';
  const name = program === 'ip' && opts.netns ? ipNetnsName(opts.netns) : undefined;
  if (name) {
    const sent = sysctls ? [['netns', 'exec', name, ...sysctlArgv(sysctls)], ...lines] : lines;
    const argv = [program, '-n', name, ...flags];
    const run = await exec(argv, { input: text(sent), allow: [1, 255] });
    if (!couldNotEnter(run)) return { run, argv, sent };
    // ip stops before its first line when it cannot set up the namespace: nothing ran.
    ipCannotEnterNetns();
  }
  if (sysctls) await setSysctlsIn(opts.netns!, sysctls);
  const argv = [program, ...flags];
  return { run: await exec(argv, { netns: opts.netns, input: text(lines), allow: [1] }), argv, sent: lines };
}

/** ip exited before running a line because it could not set up the namespace's mounts. */
function couldNotEnter(run: RunResult): boolean {
  return run.code === 255 && !/Command failed/.test(run.stderr) && /^(unshare failed|"mount --make-rslave \/" failed|mount of \/sys failed): /m.test(run.stderr);
}

/** The `ip`/`bridge` process failed as a whole (not a line of it). */
export class BatchProcessError extends Error {
  constructor(
    readonly argv: readonly string[],
    readonly result: RunResult,
    readonly netns?: string,
  ) {
    const where = netns ? ` in netns ${netns}` : '';
    super(`${argv[0]} -batch${where} failed (exit ${result.code}): ${result.stderr.trim() || result.stdout.trim()}`);
    this.name = 'BatchProcessError';
  }
}

/**
 * Maps "Command failed -:N" markers on stderr to the message printed before
 * each (the text since the previous marker).
 */
export function parseFailures(stderr: string): Map<number, string> {
  const failures = new Map<number, string>();
  const marker = /Command failed [^\n]*?:(\d+)\n?/g;
  let last = 0;
  for (let m = marker.exec(stderr); m; m = marker.exec(stderr)) {
    // A line reported twice (a forked `netns exec` child and its parent) keeps the message printed first.
    const line = Number(m[1]);
    const msg = stderr.slice(last, m.index).trim();
    if (!failures.get(line)) failures.set(line, msg);
    last = m.index + m[0].length;
  }
  return failures;
}

/**
 * Splits concatenated JSON values ("[...]\n[...]") as `ip -json -batch` prints them.
 * `partial`: output still arriving, a trailing incomplete value is left out.
 */
export function splitJson(text: string, o: { partial?: boolean } = {}): unknown[] {
  const values: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '[' || c === '{') {
      if (depth++ === 0) start = i;
    } else if (c === ']' || c === '}') {
      if (--depth === 0) values.push(JSON.parse(text.slice(start, i + 1)));
    }
  }
  if (depth !== 0 && !o.partial) throw new Error(`truncated JSON from ip: ${text.slice(start, start + 200)}`);
  return values;
}

/**
 * Runs `lines` like runBatch (every line is tried) and then throws the first
 * failed line: for callers whose lines must all succeed.
 */
export async function runBatchOrThrow(program: 'ip' | 'bridge', lines: readonly Line[], opts: BatchOptions = {}): Promise<BatchResult> {
  const res = await runBatch(program, lines, opts);
  throwOnError(program, lines, res);
  return res;
}

/** Throws the first failing line's error as an Error naming the command. */
function throwOnError(program: string, lines: readonly Line[], res: BatchResult, ignore?: (i: number, msg: string) => boolean): void {
  res.errors.forEach((msg, i) => {
    if (msg !== undefined && !ignore?.(i, msg)) {
      throw new LineError(program, lines[i], msg);
    }
  });
}

/** One batch line failed. */
export class LineError extends Error {
  constructor(
    readonly program: string,
    readonly line: Line,
    readonly reason: string,
  ) {
    super(`${program} ${line.join(' ')}: ${reason}`);
    this.name = 'LineError';
  }
}

/** A line of a Batch: once the batch ran, its error or (query lines) its parsed output. */
export interface Handle<T = undefined> {
  readonly line: Line;
  /** The error text when the line failed, otherwise undefined. */
  readonly error: string | undefined;
  /** What a successful query line printed, parsed; undefined for other lines and failed ones. */
  readonly output: T | undefined;
}

interface Slot {
  line: Line;
  error: string | undefined;
  output: unknown;
  parse?: (json: unknown) => unknown;
}

/**
 * Lines for one `ip` (or `bridge`) process, each added line handing back its
 * own Handle: callers name the results they read instead of counting indexes
 * into the batch's arrays.
 */
export class Batch {
  private readonly slots: Slot[] = [];

  constructor(readonly program: 'ip' | 'bridge') {}

  get size(): number {
    return this.slots.length;
  }

  add(line: Line): Handle {
    const slot: Slot = { line, error: undefined, output: undefined };
    this.slots.push(slot);
    return slot as Handle;
  }

  /** A query line (`... show ...`; run with json): its output goes through `parse`. */
  query<T>(line: Line, parse: (json: unknown) => T): Handle<T> {
    const slot: Slot = { line, error: undefined, output: undefined, parse };
    this.slots.push(slot);
    return slot as Handle<T>;
  }

  /** Runs every line in one process (runBatch); throws only when the process itself fails. */
  async run(opts: BatchOptions = {}): Promise<this> {
    const res = await runBatch(this.program, this.slots.map((s) => s.line), opts);
    this.slots.forEach((s, i) => {
      s.error = res.errors[i];
      s.output = s.parse && s.error === undefined ? s.parse(res.outputs[i]) : undefined;
    });
    return this;
  }

  /** The lines that failed, in order. */
  failed(): Handle<unknown>[] {
    return this.slots.filter((s) => s.error !== undefined) as Handle<unknown>[];
  }

  /** Throws the first failed line as a LineError. */
  throwFailed(): void {
    const [bad] = this.failed();
    if (bad) throw new LineError(this.program, bad.line, bad.error!);
  }
}

/** Error-text classifiers (the kernel's and iproute2's wording). */
export const isExists = (msg: string | undefined) => !!msg && /File exists/i.test(msg);
export const isNoDevice = (msg: string | undefined) =>
  !!msg && /(Cannot find device|does not exist|No such device)/i.test(msg);
