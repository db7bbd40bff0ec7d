// klog's flags on `vxlan-flannel daemon`. flanneld v0.28.9 takes three of
// them into its own flags (-v, -vmodule, -log_backtrace_at: main.go's
// copyFlag), and flanneld manifests and units pass `-v=2` as klog spells it:
// Go's single-dash long flags. -v maps to our log detail (below). The other
// klog flags flanneld does not define (its Go flag set refuses them) are
// accepted all the same, since other klog programs take them: each that
// changes nothing here says so in one log line at start (docs/vxlan-flannel.md,
// "Logging and klog's flags").
import { InvalidArgumentError, Option, type Command } from 'commander';
import { boolOption } from './flanneld-flags';

/**
 * Log detail by -v: 0 (default) start-up, every change made and every problem;
 * 1 adds a line per reconcile pass; 2 (and above) lists every change even of a
 * large full pass, and every change the watch reports.
 */
export const MAX_DETAIL = 2;

function klogLevel(value: string): number {
  // klog's Level is a Go int32; negative levels log no more than 0
  if (!/^-?\d+$/.test(value) || Math.abs(Number(value)) > 2 ** 31 - 1) {
    throw new InvalidArgumentError(`--v must be an integer (klog's verbosity), got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

function megabytes(value: string): number {
  if (!/^\d+$/.test(value)) {
    throw new InvalidArgumentError(`--log_file_max_size must be a number of megabytes, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

function vmodule(value: string): string {
  // klog: "comma-separated list of pattern=N settings"; it refuses anything else
  if (value !== '' && !/^[^=,]+=\d+(,[^=,]+=\d+)*$/.test(value)) {
    throw new InvalidArgumentError(`--vmodule must be pattern=N[,pattern=N...], got ${JSON.stringify(value)}`);
  }
  return value;
}

function backtraceAt(value: string): string {
  if (value !== '' && !/^[^:]+:\d+$/.test(value)) {
    throw new InvalidArgumentError(`--log_backtrace_at must be file:line, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** What each accepted klog flag without an effect here is, for the start-up line. */
const NO_EFFECT: Record<string, string> = {
  vmodule: 'per-file verbosity; -v sets the whole daemon\'s',
  log_backtrace_at: 'no stack traces are logged',
  logtostderr: 'logs always go to stderr',
  alsologtostderr: 'logs always go to stderr',
  log_dir: 'no log files are written: logs go to stderr (journald, the kubelet keep them)',
  log_file: 'no log files are written: logs go to stderr (journald, the kubelet keep them)',
  log_file_max_size: 'no log files are written',
  stderrthreshold: 'every line goes to stderr',
  skip_log_headers: 'no log files are written',
  add_dir_header: 'lines carry no file names',
  one_output: 'logs go to stderr only',
  legacy_stderr_threshold_behavior: 'every line goes to stderr',
};

/** Adds klog's flags to the daemon's command. */
export function addKlogFlags(cmd: Command): Command {
  const hidden = (o: Option) => o.hideHelp(); // documented in docs/vxlan-flannel.md; -v is what users look for
  return cmd
    .addOption(
      new Option('--v <level>', 'klog\'s verbosity (also -v=N): 0 (default) changes and problems, 1 a line per reconcile pass, 2 every change')
        .argParser(klogLevel),
    )
    .addOption(hidden(new Option('--vmodule <pattern=N,...>').argParser(vmodule)))
    .addOption(hidden(new Option('--log_backtrace_at <file:line>').argParser(backtraceAt)))
    .addOption(hidden(boolOption('--skip_headers', 'log lines without the time', false)))
    .addOption(hidden(boolOption('--logtostderr', '', true)))
    .addOption(hidden(boolOption('--alsologtostderr', '', false)))
    .addOption(hidden(new Option('--log_dir <dir>')))
    .addOption(hidden(new Option('--log_file <file>')))
    .addOption(hidden(new Option('--log_file_max_size <MB>').argParser(megabytes)))
    .addOption(hidden(new Option('--stderrthreshold <severity>')))
    .addOption(hidden(boolOption('--skip_log_headers', '', false)))
    .addOption(hidden(boolOption('--add_dir_header', '', false)))
    .addOption(hidden(boolOption('--one_output', '', false)))
    .addOption(hidden(boolOption('--legacy_stderr_threshold_behavior', '', true)));
}

export interface KlogSettings {
  /** Log detail, 0 to MAX_DETAIL. */
  detail: number;
  /** Log lines without their time (--skip_headers). */
  skipHeaders: boolean;
  /** One line per klog flag given that changes nothing here. */
  notes: string[];
}

/** What the klog flags `cmd` parsed mean for the daemon. */
export function klogSettings(cmd: Command): KlogSettings {
  const o = cmd.opts() as Record<string, unknown>;
  const notes: string[] = [];
  for (const [key, what] of Object.entries(NO_EFFECT)) {
    const source = cmd.getOptionValueSource(key);
    if (source === 'cli' || source === 'env') notes.push(`--${key}=${String(o[key])}: accepted as klog's flag, no effect: ${what}`);
  }
  const v = (o.v as number | undefined) ?? 0;
  return { detail: Math.max(0, Math.min(v, MAX_DETAIL)), skipHeaders: o.skip_headers === true, notes };
}

/**
 * Go's flag package reads `-name` as `--name` (and `-name=value`): the daemon's
 * arguments with each flag given so rewritten for commander. `takesValue(long)`
 * says whether a flag's value may be the next argument, which is then left as
 * it is ("--iface-regex -x"). `-h` stays commander's help.
 */
export function goStyleFlags(args: readonly string[], takesValue: (long: string) => boolean): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--') {
      out.push(...args.slice(i));
      break;
    }
    const flag = /^-(?!-)([\w][\w.-]*)(=.*)?$/.exec(a);
    const long = flag && a !== '-h' ? `--${flag[1]}` : a.startsWith('--') ? a.split('=')[0] : undefined;
    out.push(flag && a !== '-h' ? `--${a.slice(1)}` : a);
    if (long && !a.includes('=') && takesValue(long) && i + 1 < args.length) out.push(args[++i]);
  }
  return out;
}
