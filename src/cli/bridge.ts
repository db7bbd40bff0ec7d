// bridge's operator commands.
import { baseProgram, runProgram } from './program';
import { attachmentTags, hostVethName, netTag } from '../bridge/names';
import { formatTable } from '../util/table';

export async function main(argv: string[]): Promise<void> {
  const program = baseProgram('bridge', 'bridge: attaches containers to a Linux bridge through a veth pair, with addresses from an IPAM plugin.');
  program
    .command('veth-name')
    .description("print the host-side veth name and rule tags of an attachment (as DEL and CHECK derive them)")
    .argument('<containerID>', 'the CNI_CONTAINERID')
    .argument('<ifname>', 'the CNI_IFNAME, e.g. eth0')
    .option('--network <name>', 'network name, to also print the rule tags')
    .action((containerId: string, ifname: string, opts: { network?: string }) => {
      const out: Record<string, string> = { hostVeth: hostVethName(containerId, ifname) };
      if (opts.network) Object.assign(out, attachmentTags(opts.network, containerId, ifname));
      process.stdout.write(JSON.stringify(out, null, 2) + '\n');
    });
  program
    .command('masq')
    .description('list the masquerade rules the bridge plugin installed, per attachment: network, container, interface, addresses')
    .option('--backend <backend>', 'iptables or nftables', 'iptables')
    .option('--network <name>', 'only this network')
    .option('--json', 'print JSON')
    .action(async (opts: { backend: string; network?: string; json?: boolean }) => {
      if (opts.backend !== 'iptables' && opts.backend !== 'nftables') throw new Error('--backend must be iptables or nftables');
      const { masqList } = await import('../iproute/masq');
      const entries = await masqList(opts.backend);
      const want = opts.network ? netTag(opts.network) : undefined;
      const rows = entries.filter((e) => !want || e.netTag === want);
      if (opts.json) process.stdout.write(JSON.stringify(rows, null, 2) + '\n');
      else {
        // the names the comment carries; the tag where it lost them (a rule of another build, cut short)
        const cells = rows.map((e) => [
          e.network ?? `(tag ${e.netTag})`,
          e.containerId ?? '-',
          e.ifname ?? '-',
          e.ips.join(','),
          e.masquerades ? 'yes' : 'no',
          e.backend,
          e.attTag,
        ]);
        process.stdout.write(formatTable(['NETWORK', 'CONTAINER', 'IFNAME', 'IPS', 'MASQUERADE', 'BACKEND', 'TAG'], cells));
      }
    });
  await runProgram(program, argv);
}
