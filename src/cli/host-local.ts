// host-local's operator commands: parse and print; the work is in src/ipam
// (ls) and src/repair (repair, loaded only by that command: it brings the
// CRI client and its gRPC library).
import { InvalidArgumentError } from 'commander';
import { baseProgram, runProgram } from './program';
import { DEFAULT_DATA_DIR } from '../ipam/config';
import { formatListing, listReservations } from '../ipam/ls';

/** repair's exit codes (docs/host-local.md): the runtime did not answer, and some stale state could not be released. */
const EXIT_RUNTIME_UNAVAILABLE = 2;
const EXIT_INCOMPLETE = 3;

interface RepairFlags {
  runtimeEndpoint: string;
  confDir: string;
  binDir: string;
  cacheDir: string;
  maxConfNum: number;
  minAge: string;
  dryRun?: boolean;
  json?: boolean;
}

/** "0", "90s", "5m", "2h" (a bare number is seconds) in milliseconds. */
function durationMs(value: string): number {
  const m = /^(\d+)(s|m|h)?$/.exec(value);
  if (!m) throw new InvalidArgumentError('expected a duration such as 90s, 5m or 2h');
  return Number(m[1]) * { s: 1_000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 's' | 'm' | 'h'];
}

function wholeNumber(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('expected a whole number (0: all)');
  return Number(value);
}

export async function main(argv: string[]): Promise<void> {
  const program = baseProgram('host-local', 'host-local IPAM: hands out addresses from ranges, reserved as files on disk.');
  program
    .command('ls')
    .description('list reserved addresses (ip, container, ifname, range set, state): parked ones with their pod and when the parking ends; flags torn reservation files')
    .argument('[network]', 'only this network')
    .option('--data-dir <dir>', 'the host-local dataDir', DEFAULT_DATA_DIR)
    .option('--conf-dir <dir>', 'CNI config directory, to tell range sets apart', '/etc/cni/net.d')
    .option('--json', 'print JSON')
    .action(async (network: string | undefined, opts: { dataDir: string; confDir: string; json?: boolean }) => {
      // a flannel network's host-local ranges are rendered from subnet.env by flannel's plugin
      const { delegateIpamOf } = await import('../flannel/plugin/cni');
      const rows = await listReservations(opts.dataDir, opts.confDir, network, delegateIpamOf);
      process.stdout.write(opts.json ? JSON.stringify(rows, null, 2) + '\n' : formatListing(rows));
    });
  program
    .command('repair')
    .description(
      'release what containers the runtime no longer knows left behind (addresses, masquerade rules, host veths, ' +
        'saved flannel configs): asks the runtime over CRI which pod sandboxes exist, then runs each network\'s GC ' +
        'through its own plugins. Lists the attachments released.',
    )
    .requiredOption('--runtime-endpoint <endpoint>', 'the runtime\'s CRI socket (unix:///run/containerd/containerd.sock)')
    .option('--conf-dir <dir>', 'the runtime\'s CNI config directory', '/etc/cni/net.d')
    .option('--bin-dir <dirs>', 'the runtime\'s CNI plugin directories, colon-separated', '/opt/cni/bin')
    .option('--cache-dir <dir>', 'libcni\'s cache directory (results of every attachment)', '/var/lib/cni')
    .option('--max-conf-num <n>', 'how many config files the runtime loads, in name order (containerd\'s max_conf_num; 0: all)', wholeNumber, 1)
    .option('--min-age <duration>', 'never release state younger than this (a pod being created is not listed yet)', '5m')
    .option('--dry-run', 'change nothing; list what would be released')
    .option('--json', 'print the attachments as a JSON array (the summary goes to stderr)')
    .action(async (o: RepairFlags) => {
      const minAgeMs = durationMs(o.minAge);
      const [{ repair }, { formatReleased, formatSummary }, { CriError }] = await Promise.all([
        import('../repair/repair'),
        import('../repair/format'),
        import('../runtime/cri'),
      ]);
      let report;
      try {
        report = await repair({
          runtimeEndpoint: o.runtimeEndpoint,
          confDir: o.confDir,
          binDirs: o.binDir.split(':').filter(Boolean),
          cacheDir: o.cacheDir,
          maxConfNum: o.maxConfNum,
          minAgeMs,
          dryRun: !!o.dryRun,
        });
      } catch (err) {
        if (!(err instanceof CriError)) throw err;
        process.stderr.write(`host-local repair: ${err.message}; nothing was changed\n`);
        process.exitCode = EXIT_RUNTIME_UNAVAILABLE;
        return;
      }
      for (const i of report.ignored) process.stderr.write(`host-local repair: ${i.file}: not collected: ${i.reason}\n`);
      for (const e of report.errors) process.stderr.write(`host-local repair: ${e}\n`);
      const summary = formatSummary(report, { dryRun: !!o.dryRun, minAge: o.minAge });
      if (o.json) {
        process.stdout.write(JSON.stringify(report.released, null, 2) + '\n');
        process.stderr.write(summary);
      } else process.stdout.write(formatReleased(report) + summary);
      if (report.errors.length) process.exitCode = EXIT_INCOMPLETE;
    });
  await runProgram(program, argv);
}
