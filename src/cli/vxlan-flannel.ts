// vxlan-flannel's command line: the node daemon and the operator commands.
// Parses flags and prints; the work is in src/flannel.
import { Command, InvalidArgumentError, Option } from 'commander';
import { baseProgram, runProgram } from './program';
import { boolOption, collect, optionsFromEnv } from './flanneld-flags';
import { addKlogFlags, goStyleFlags, klogSettings } from './klog-flags';
import { IP, Prefix } from '../net/ip';
import { formatLeases, leaseRows, releaseSubnet } from '../flannel/commands/leases';
import { BACKEND_TYPES, NetworkConfigOptions, formatNetworkConfig } from '../flannel/netconfig';
import { withStore } from '../flannel/store/open-store';
import { DEFAULT_LEASE_DIR, DEFAULT_LEASE_TTL_S, DEFAULT_PREFIX, StoreOptions } from '../flannel/store/store';
import { DEFAULT_SUBNET_FILE } from '../flannel/subnet-env';
import { DEFAULT_DATA_DIR } from '../flannel/attachments';
import { DEFAULT_ANNOTATION_PREFIX } from '../flannel/kube/annotations';
import { DEFAULT_NET_CONF_PATH } from '../flannel/kube/config';
import type { KubeOptions } from '../flannel/kube/kube-manager';
import { DEFAULT_DATA_DIR as IPAM_DATA_DIR } from '../ipam/config';
import { isAbsolute, normalize } from 'node:path';
import type { DaemonProcess } from '../flannel/commands/daemon-process';

interface StoreFlags {
  etcdEndpoints?: string;
  etcdPrefix: string;
  etcdCafile?: string;
  etcdCertfile?: string;
  etcdKeyfile?: string;
  etcdUsername?: string;
  etcdPassword?: string;
  leaseDir: string;
  kubeSubnetMgr: boolean;
}

interface KubeFlags {
  kubeSubnetMgr: boolean;
  kubeconfigFile?: string;
  kubeApiUrl?: string;
  kubeAnnotationPrefix: string;
  netConfigPath: string;
  nodeName?: string;
  /** The daemon's only. */
  setNodeNetworkUnavailable?: boolean;
}

function intArg(name: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || n < min || n > max) throw new InvalidArgumentError(`${name} must be an integer from ${min} to ${max}`);
    return n;
  };
}

function absolutePath(name: string) {
  return (value: string): string => {
    if (!isAbsolute(value) || value.includes('\0')) throw new InvalidArgumentError(`${name} must be an absolute path`);
    return normalize(value);
  };
}

function ipArg(name: string) {
  return (value: string): string => {
    if (!IP.parse(value)) throw new InvalidArgumentError(`${name} must be an IPv4 or IPv6 address`);
    return value;
  };
}

/** What status reads the node's state with. */
type StatusFlags = StoreFlags & KubeFlags & { subnetFile: string };

/** The daemon's flags as commander hands them over. */
interface DaemonFlags extends StoreFlags, KubeFlags {
  iface?: string[];
  ifaceRegex?: string[];
  ifaceCanReach?: string;
  publicIp?: string;
  publicIpv6?: string;
  subnetFile: string;
  subnetLeaseRenewMargin: number;
  ipMasq: boolean;
  ipMasqFullyRandomDisable: boolean;
  iptablesResync: number;
  iptablesForwardRules: boolean;
  healthzIp: string;
  healthzPort: number;
  leaseTtl: number;
  reconcileInterval: number;
  ipBlackholeRoute: boolean;
  releaseOnExit: boolean;
  cniDataDir: string;
  setNodeNetworkUnavailable: boolean;
  ipamDataDir: string;
  networkPolicy: boolean;
}

function storeFlags(cmd: Command): Command {
  return cmd
    .addOption(boolOption('--kube-subnet-mgr', 'leases are the Kubernetes Nodes\' pod CIDRs, not a store (daemon, status; the store commands refuse it)', false))
    .option('--etcd-endpoints <urls>', 'etcd endpoints, comma-separated (http://10.0.0.1:2379,...); without it, the embedded file store')
    .option('--etcd-prefix <prefix>', 'etcd key prefix', DEFAULT_PREFIX)
    .option('--etcd-cafile <file>', 'CA certificate for etcd TLS')
    .option('--etcd-certfile <file>', 'client certificate for etcd TLS')
    .option('--etcd-keyfile <file>', 'client key for etcd TLS')
    .option('--etcd-username <name>', 'etcd user')
    .addOption(new Option('--etcd-password <password>', 'etcd password').env('ETCD_PASSWORD'))
    .option('--lease-dir <dir>', 'the embedded store\'s directory (when no --etcd-endpoints)', DEFAULT_LEASE_DIR);
}

/** flanneld's Kubernetes flags (used with --kube-subnet-mgr). */
function kubeFlags(cmd: Command): Command {
  return cmd
    .option('--kubeconfig-file <file>', 'kubeconfig to reach the API with (default: the in-cluster service account)')
    .option('--kube-api-url <url>', 'the API server\'s URL (replaces the kubeconfig\'s server)')
    .option('--kube-annotation-prefix <prefix>', 'prefix of the Node annotations flannel writes and reads', DEFAULT_ANNOTATION_PREFIX)
    .option('--net-config-path <path>', 'the network config (kube-flannel\'s net-conf.json)', DEFAULT_NET_CONF_PATH)
    .addOption(new Option('--node-name <name>', 'this node\'s Node (without it: the node of pod $POD_NAMESPACE/$POD_NAME)').env('NODE_NAME'));
}

function kubeOptions(f: KubeFlags, env: NodeJS.ProcessEnv = process.env): KubeOptions | undefined {
  if (!f.kubeSubnetMgr) return undefined;
  return {
    kubeconfigFile: f.kubeconfigFile,
    apiUrl: f.kubeApiUrl,
    nodeName: f.nodeName ?? '',
    env, // the in-cluster configuration's KUBERNETES_SERVICE_HOST/PORT (status reading a running daemon's: its own)
    // kube-flannel.yml names our pod, not the node: the node is looked up from it, as flanneld does
    ...(env.POD_NAME && env.POD_NAMESPACE ? { pod: { namespace: env.POD_NAMESPACE, name: env.POD_NAME } } : {}),
    netConfPath: f.netConfigPath,
    annotationPrefix: f.kubeAnnotationPrefix,
    setNodeNetworkUnavailable: f.setNodeNetworkUnavailable ?? true,
  };
}

/** The store commands have no meaning with --kube-subnet-mgr: the Nodes are the leases, kubectl shows and changes them. */
function refuseKube(f: { kubeSubnetMgr: boolean }, command: string): void {
  if (!f.kubeSubnetMgr) return;
  throw new Error(
    `\`vxlan-flannel ${command}\` works on a lease store (etcd, the file store); with --kube-subnet-mgr the leases are the Nodes' pod CIDRs and annotations: ` +
      'use kubectl (kubectl get nodes -o custom-columns=NAME:.metadata.name,PODCIDRS:.spec.podCIDRs) and `vxlan-flannel status --kube-subnet-mgr`',
  );
}

function storeOptions(f: StoreFlags): StoreOptions {
  return {
    ...(f.etcdEndpoints ? { etcdEndpoints: f.etcdEndpoints.split(',').filter(Boolean) } : {}),
    etcdPrefix: f.etcdPrefix,
    leaseDir: f.leaseDir,
    ...(f.etcdCafile ? { etcdCaFile: f.etcdCafile } : {}),
    ...(f.etcdCertfile ? { etcdCertFile: f.etcdCertfile } : {}),
    ...(f.etcdKeyfile ? { etcdKeyFile: f.etcdKeyfile } : {}),
    ...(f.etcdUsername ? { etcdUsername: f.etcdUsername, etcdPassword: f.etcdPassword ?? '' } : {}),
  };
}

/** `vxlan-flannel daemon`'s flags (flanneld's, klog's, ours) on `cmd`: the daemon's command, and status reading a running daemon's. */
function addDaemonFlags(cmd: Command): Command {
  return addKlogFlags(kubeFlags(storeFlags(
    cmd
      .option('--iface <name-or-ip>', 'underlay interface, by name or by an address it holds; repeat to try several in order, the first match wins (default: the default route\'s)', collect)
      .option('--iface-regex <regex>', 'underlay interface whose address, else name, matches; repeatable, tried after --iface', collect)
      .option('--iface-can-reach <ip>', 'underlay interface: the one the route to this address leaves by (`ip route get`), tried last', ipArg('--iface-can-reach'))
      .option('--public-ip <ip>', 'address peers reach this node at (default: the interface\'s first IPv4)')
      .option('--public-ipv6 <ip>', 'IPv6 address peers reach this node at, for an IPv6 or dual-stack overlay (default: the interface\'s first global IPv6)')
      .option('--subnet-file <path>', 'where to write subnet.env', DEFAULT_SUBNET_FILE)
      .option('--subnet-lease-renew-margin <minutes>', 'renew the lease this long before it expires (at most half its TTL)', intArg('--subnet-lease-renew-margin', 1, 1439), 60)
      .addOption(boolOption('--ip-masq', 'masquerade what pods send outside the cluster network (flanneld\'s rules) and write FLANNEL_IPMASQ=true, so the CNI delegate does not', false))
      .addOption(boolOption('--ip-masq-fully-random-disable', 'masquerade without --random-fully', false))
      .option('--iptables-resync <seconds>', 'how often the firewall rules are checked and put back', intArg('--iptables-resync', 1, 3600), 5)
      .addOption(boolOption('--iptables-forward-rules', 'accept forwarding to and from the cluster network (a FORWARD policy of DROP, as Docker sets it, then still carries pods\' traffic); =false: no such rules', true))
      .option('--healthz-ip <ip>', 'address /healthz and /readyz listen on', ipArg('--healthz-ip'), '0.0.0.0')
      .option('--healthz-port <port>', 'port for /healthz and /readyz; 0: no health server', intArg('--healthz-port', 0, 65535), 0)
      .option('--ipam-data-dir <dir>', 'host-local\'s data directory, read (never written) for /metrics\' flannel_pod_addresses', absolutePath('--ipam-data-dir'), IPAM_DATA_DIR)
      .option('--lease-ttl <seconds>', 'lease lifetime, renewed before it ends', intArg('--lease-ttl', 10, 7 * 86400), DEFAULT_LEASE_TTL_S)
      .option('--reconcile-interval <seconds>', 'period of the full reconcile, which reads every peer entry back from the kernel (drift is repaired as the kernel reports it: this is the safety net; 10 s while notifications cannot be followed)', intArg('--reconcile-interval', 1, 3600), 300)
      .addOption(boolOption('--ip-blackhole-route', 'a blackhole route for this node\'s own subnet (traffic to its addresses that no pod holds is dropped here)', false))
      .addOption(boolOption('--release-on-exit', 'on SIGTERM/SIGINT give back the lease and remove the VTEPs, subnet.env and firewall rules (the node leaves)', false))
      .option(
        '--cni-data-dir <dir>',
        'the flannel CNI plugin\'s dataDir: attachment files that flannel\'s own plugin DELeted and left there are removed; "": not looked at',
        DEFAULT_DATA_DIR,
      )
      .addOption(boolOption('--set-node-network-unavailable', 'with --kube-subnet-mgr: set the Node\'s NetworkUnavailable condition to False once the overlay is up', true))
      .addOption(
        boolOption(
          '--network-policy',
          'with --kube-subnet-mgr: enforce Kubernetes NetworkPolicy for this node\'s pods, in the nftables table inet flannel-netpol (off: the table is removed); see docs/network-policy.md',
          false,
        ),
      ),
  )));
}

/** flanneld without --etcd-endpoints (and not --kube-subnet-mgr) reads etcd here; ours uses its file store. */
const FLANNELD_ETCD_DEFAULT = 'http://127.0.0.1:4001,http://127.0.0.1:2379';

/**
 * The flags of a running daemon's command line and environment (a
 * DaemonProcess), parsed as `daemon` parses its own: what status reads the
 * node's leases with. Flags it does not know are skipped (status needs only
 * the store's, Kubernetes' and --subnet-file).
 */
export function parseDaemonFlags(d: Pick<DaemonProcess, 'kind' | 'args' | 'env'>): DaemonFlags {
  const env = d.env ?? {};
  const cmd = addDaemonFlags(new Command('daemon'))
    .allowUnknownOption()
    .allowExcessArguments()
    .exitOverride()
    .configureOutput({ writeOut: () => {}, writeErr: () => {} })
    .action(() => {});
  const takesValue = (long: string) => !!cmd.options.find((opt) => opt.long === long)?.required;
  cmd.parse(goStyleFlags(d.args, takesValue), { from: 'user' });
  optionsFromEnv(cmd, 'FLANNELD', env);
  // the variables the flags read beside FLANNELD_* (ETCD_PASSWORD, NODE_NAME): the daemon's, not ours
  for (const opt of cmd.options) {
    const key = opt.attributeName();
    if (opt.envVar && cmd.getOptionValueSource(key) !== 'cli' && env[opt.envVar]) cmd.setOptionValueWithSource(key, env[opt.envVar], 'env');
  }
  const flags = cmd.opts() as DaemonFlags;
  if (d.kind === 'flanneld' && !flags.kubeSubnetMgr && !flags.etcdEndpoints) flags.etcdEndpoints = FLANNELD_ETCD_DEFAULT;
  return flags;
}

/** What status reads: the flags given, or those of the daemon running on this node when none are. */
interface StatusSettings {
  flags: StatusFlags;
  /** Where the kube configuration's variables come from: ours, or the daemon's. */
  env: NodeJS.ProcessEnv;
  /** The daemon whose flags these are, for the report. */
  daemon?: string;
  note?: string;
}

async function statusSettings(o: StatusFlags, cmd: Command): Promise<StatusSettings> {
  const given = cmd.options.some((opt) => opt.long !== '--json' && cmd.getOptionValueSource(opt.attributeName()) === 'cli');
  if (given) return { flags: o, env: process.env };
  const { describeDaemon, findDaemons } = await import('../flannel/commands/daemon-process');
  const [d, ...more] = findDaemons();
  if (!d) {
    return {
      flags: o,
      env: process.env,
      note:
        'no vxlan-flannel daemon (or flanneld) runs in this network namespace, so the defaults were read; give the flags it runs with: ' +
        '--etcd-endpoints URLS [--etcd-prefix P] or --lease-dir DIR or --kube-subnet-mgr [--kubeconfig-file F --node-name N], and --subnet-file F',
    };
  }
  if (!d.sameFiles) {
    throw new Error(
      `the daemon here (${describeDaemon(d)}) runs in another mount namespace (a container): its files are not these. ` +
        'Run status inside it (kubectl -n kube-flannel exec ds/kube-flannel-ds -- /opt/cni-ts/bin/vxlan-flannel status), or give the flags',
    );
  }
  const others = more.length ? ` (also running here: ${more.map((m) => `pid ${m.pid}`).join(', ')})` : '';
  const unread = d.env ? {} : { note: 'its environment could not be read (run as root): FLANNELD_* variables not applied' };
  return { flags: parseDaemonFlags(d), env: d.env ?? {}, daemon: `${describeDaemon(d)}${others}`, ...unread };
}

export async function main(argv: string[]): Promise<void> {
  const program = baseProgram(
    'vxlan-flannel',
    'A flannel-compatible VXLAN overlay: the node daemon (leases in etcd or a local store, VTEP, peers) and its CNI plugin.',
  );

  const daemon = addDaemonFlags(
    program
      .command('daemon')
      .description(
        'hold this node\'s subnet lease, keep the VTEP and subnet.env, program every peer; runs until SIGTERM. ' +
          'As flanneld, every flag can also be given as FLANNELD_<FLAG> (FLANNELD_IFACE=eth0, FLANNELD_IP_MASQ=true); the command line wins',
      ),
  );
  daemon.hook('preAction', (cmd) => optionsFromEnv(cmd, 'FLANNELD'));
  daemon.action(async (o: DaemonFlags, cmd: Command) => {
    const { runDaemon } = await import('../flannel/daemon/run-daemon');
    const klog = klogSettings(cmd);
    process.exit(
      await runDaemon({
        iface: o.iface,
        ifaceRegex: o.ifaceRegex,
        ifaceCanReach: o.ifaceCanReach,
        publicIp: o.publicIp,
        publicIpv6: o.publicIpv6,
        store: storeOptions(o),
        kube: kubeOptions(o),
        subnetFile: o.subnetFile,
        leaseTtlS: o.leaseTtl,
        renewMarginS: o.subnetLeaseRenewMargin * 60,
        reconcileMs: o.reconcileInterval * 1000,
        traffic: {
          ipMasq: o.ipMasq,
          randomFully: !o.ipMasqFullyRandomDisable,
          forwardRules: o.iptablesForwardRules,
          resyncMs: o.iptablesResync * 1000,
        },
        ...(o.healthzPort ? { healthz: { ip: o.healthzIp, port: o.healthzPort } } : {}),
        ipBlackholeRoute: o.ipBlackholeRoute,
        releaseOnExit: o.releaseOnExit,
        ipamDir: o.ipamDataDir,
        ...(o.cniDataDir ? { cniDataDir: o.cniDataDir } : {}),
        logDetail: klog.detail,
        skipHeaders: klog.skipHeaders,
        notes: klog.notes,
        networkPolicy: o.networkPolicy,
      }),
    );
  });

  const network = program.command('network').description('the overlay network config (<prefix>/config)');
  storeFlags(
    network
      .command('set')
      .description('write the network config in flannel\'s schema')
      .option('--network <cidr>', 'the IPv4 overlay, e.g. 10.244.0.0/16 (required unless --ipv6-only)')
      .option('--subnet-len <n>', 'prefix length of each node\'s subnet (default 24, or smaller networks split in four)', intArg('--subnet-len', 1, 30))
      .option('--subnet-min <ip>', 'first subnet handed out (SubnetMin; default: the second subnet of the network)')
      .option('--subnet-max <ip>', 'last subnet handed out (SubnetMax; default: the last subnet of the network)')
      .option('--ipv6-network <cidr>', 'the IPv6 overlay, e.g. fd00:10:244::/56 (EnableIPv6: dual stack, or IPv6 only with --ipv6-only)')
      .option('--ipv6-subnet-len <n>', 'prefix length of each node\'s IPv6 subnet (default 64)', intArg('--ipv6-subnet-len', 1, 126))
      .option('--ipv6-subnet-min <ip>', 'first IPv6 subnet handed out (IPv6SubnetMin)')
      .option('--ipv6-subnet-max <ip>', 'last IPv6 subnet handed out (IPv6SubnetMax)')
      .option('--ipv6-only', 'no IPv4 overlay (EnableIPv4 false)', false)
      .option('--backend <type>', 'Backend.Type: vxlan (default) or host-gw (routes via the peers\' addresses: every node on one L2 segment)')
      .option('--vni <n>', 'VXLAN network identifier (default 1)', intArg('--vni', 0, 16777215))
      .option('--port <n>', 'VXLAN UDP port (default 8472)', intArg('--port', 1, 65535))
      .option('--mtu <n>', 'Backend.MTU: the underlay\'s MTU, as flannel reads it; VTEPs get it less 50 (IPv6: 70) (default: the underlay interface\'s)', intArg('--mtu', 118, 65535))
      .option('--direct-routing', 'Backend.DirectRouting: peers on a directly connected underlay subnet are routed without VXLAN', false)
      .option('--gbp', 'Backend.GBP: VTEPs with the VXLAN Group Policy extension', false)
      .option('--learning', 'Backend.Learning: VTEPs learn remote MACs', false)
      .option('--enable-nftables', 'EnableNFTables: the daemons\' masquerade and forward rules in nftables, not iptables', false),
  ).action(async (o: StoreFlags & NetworkConfigOptions & { ipv6Only: boolean; enableNftables: boolean }) => {
    refuseKube(o, 'network set');
    if (o.ipv6Only && o.network !== undefined) throw new Error('--network and --ipv6-only cannot be given together');
    if (o.ipv6Only && o.ipv6Network === undefined) throw new Error('--ipv6-only needs --ipv6-network');
    if (o.backend !== undefined && !(BACKEND_TYPES as readonly string[]).includes(o.backend)) throw new Error(`--backend ${JSON.stringify(o.backend)}: must be ${BACKEND_TYPES.join(' or ')}`);
    const text = formatNetworkConfig({
      ...(o.backend ? { backend: o.backend } : {}),
      network: o.network,
      subnetLen: o.subnetLen,
      subnetMin: o.subnetMin,
      subnetMax: o.subnetMax,
      ...(o.ipv6Only ? { ipv4: false } : {}),
      ipv6Network: o.ipv6Network,
      ipv6SubnetLen: o.ipv6SubnetLen,
      ipv6SubnetMin: o.ipv6SubnetMin,
      ipv6SubnetMax: o.ipv6SubnetMax,
      vni: o.vni,
      port: o.port,
      mtu: o.mtu,
      directRouting: o.directRouting,
      gbp: o.gbp,
      learning: o.learning,
      nftables: o.enableNftables,
    });
    await withStore(storeOptions(o), (store) => store.setConfig(text));
    process.stdout.write(`${text}\n`);
  });
  storeFlags(network.command('get').description('print the network config')).action(async (o: StoreFlags) => {
    refuseKube(o, 'network get');
    const text = await withStore(storeOptions(o), async (store) => {
      const config = await store.getConfig();
      if (config === undefined) throw new Error(`${store.description} has no network config`);
      return config;
    });
    process.stdout.write(`${text}\n`);
  });

  storeFlags(program.command('leases').description('list every lease in the store').option('--json', 'print JSON')).action(
    async (o: StoreFlags & { json?: boolean }) => {
      refuseKube(o, 'leases');
      const list = await withStore(storeOptions(o), (store) => store.list());
      process.stdout.write(o.json ? JSON.stringify({ leases: leaseRows(list), bad: list.bad }, null, 2) + '\n' : formatLeases(list));
    },
  );

  storeFlags(
    program
      .command('release')
      .description('remove a lease from the store (a node that left without --release-on-exit)')
      .argument('<subnet>', 'the lease\'s subnet, IPv4 or IPv6, e.g. 10.244.3.0/24 or fd00:10:244:3::/64'),
  ).action(async (subnetText: string, o: StoreFlags) => {
    refuseKube(o, 'release');
    const subnet = Prefix.parse(subnetText);
    if (!subnet || subnet.hasHostBits) throw new Error(`${JSON.stringify(subnetText)} is not a subnet like 10.244.3.0/24 or fd00:10:244:3::/64`);
    await withStore(storeOptions(o), (store) => releaseSubnet(store, subnet));
  });

  kubeFlags(storeFlags(
    program
      .command('status')
      .description(
        'this node\'s lease and VTEP, and whether each peer\'s neighbour, FDB entry and route are in place (exit 1 when not); ' +
          'without flags, those of the daemon running on this node (its command line and FLANNELD_* variables)',
      )
      .option('--subnet-file <path>', 'subnet.env of this node', DEFAULT_SUBNET_FILE)
      .option('--json', 'print JSON'),
  )).action(async (o: StatusFlags & { json?: boolean }, cmd: Command) => {
    const { collectStatus, formatStatus } = await import('../flannel/commands/status');
    const { flags, env, daemon, note } = await statusSettings(o, cmd);
    const kube = kubeOptions(flags, env);
    const report = kube
      ? await (await import('../flannel/commands/kube-status')).withKubeStatus(kube, (source) => collectStatus(source, flags.subnetFile))
      : await withStore(storeOptions(flags), (store) => collectStatus(store, flags.subnetFile));
    if (daemon) report.daemon = daemon;
    if (note) report.notes.push(note);
    process.stdout.write(o.json ? JSON.stringify(report, null, 2) + '\n' : formatStatus(report));
    if (report.problems.length) process.exitCode = 1;
  });

  program
    .command('policy')
    .description('which NetworkPolicies select a pod and what they allow, from the Kubernetes API (what the daemon enforces with --network-policy); with --from and --port, whether that connection is allowed')
    .argument('<pod>', 'namespace/name')
    .option('--from <pod-or-address>', 'a pod (namespace/name) or an address the connection comes from')
    .option('--port <protocol/port>', 'with --from: tcp/80, udp/53, sctp/9 (a bare number is TCP)')
    .option('--kubeconfig-file <file>', 'kubeconfig to reach the API with (default: the in-cluster service account)')
    .option('--kube-api-url <url>', 'the API server\'s URL (replaces the kubeconfig\'s server)')
    .option('--json', 'print JSON')
    .action(async (pod: string, o: { from?: string; port?: string; kubeconfigFile?: string; kubeApiUrl?: string; json?: boolean }) => {
      if (!/^[^/\s]+\/[^/\s]+$/.test(pod)) throw new Error(`${JSON.stringify(pod)} is not a pod: give namespace/name`);
      const { policyAnswer, formatPolicyAnswer } = await import('../flannel/commands/policy');
      const answer = await policyAnswer({ kubeconfigFile: o.kubeconfigFile, apiUrl: o.kubeApiUrl }, { pod, from: o.from, port: o.port });
      process.stdout.write(o.json ? JSON.stringify(answer, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2) + '\n' : formatPolicyAnswer(answer));
    });

  // kube-flannel.yml's init containers (deploy/kube-flannel.yml)
  program
    .command('install-plugin')
    .description('copy this executable into a CNI bin directory (the host\'s /opt/cni/bin) as each NAME (default: flannel), atomically; a name already holding the same bytes is left alone')
    .argument('<dest-dir>', 'the CNI bin directory')
    .argument('[names...]', 'flannel, bridge, host-local, vxlan-flannel')
    .option('--from <file>', 'the executable to copy (default: this one, when it is the standalone executable)')
    .action(async (destDir: string, names: string[], o: { from?: string }) => {
      const { installPlugin } = await import('../flannel/commands/install');
      const self = process.execPath;
      const from = o.from ?? (/^(flannel|bridge|host-local|vxlan-flannel)$/.test(self.split('/').pop() ?? '') ? self : undefined);
      if (!from) throw new Error(`this is not the standalone executable (${self}): give --from <file>`);
      for (const line of installPlugin(from, destDir, names.length ? names : ['flannel'])) process.stdout.write(`${line}\n`);
    });
  program
    .command('install-conf')
    .description('flannel\'s install-conf: copy a CNI config (the ConfigMap\'s cni-conf.json) to its place (/etc/cni/net.d/10-flannel.conflist) atomically, once it is checked to be one')
    .argument('<src>', 'the config to install')
    .argument('<dest>', 'where the runtime reads it')
    .action(async (src: string, dest: string) => {
      const { installConf } = await import('../flannel/commands/install');
      process.stdout.write(`${installConf(src, dest)}\n`);
    });

  // flanneld's command lines spell flags as Go does (-v=2, -etcd-endpoints=...)
  const takesValue = (long: string) => !!daemon.options.find((opt) => opt.long === long)?.required;
  await runProgram(program, argv[2] === 'daemon' ? [...argv.slice(0, 3), ...goStyleFlags(argv.slice(3), takesValue)] : argv);
}
