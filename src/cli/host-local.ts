// host-local's operator commands.
import { baseProgram, runProgram } from './common';
import { DEFAULT_DATA_DIR } from '../ipam/config';
import { formatListing, listReservations } from '../ipam/ls';

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
      const rows = await listReservations(opts.dataDir, opts.confDir, network);
      process.stdout.write(opts.json ? JSON.stringify(rows, null, 2) + '\n' : formatListing(rows));
    });
  await runProgram(program, argv);
}
