// ADD, host side: the bridge, the veth pair (its peer created directly in the
// container's namespace), port flags, the gateway addresses and the host's
// sysctls. Two `ip -batch` processes:
//   1. create the bridge if it is missing, and read what the name holds now
//      (and the VLAN gateway link's addresses): nothing that already exists
//      is touched before its kind is known;
//   2. only on a bridge: bring it up, the veth pair, port flags, the gateway
//      addresses, and the reads for the result.
import { CniError, ErrorCode } from '../cni/errors';
import { Batch, isExists } from '../iproute/batch';
import { addrCidr, addrDel, addrReplace, type AddrInfo } from '../iproute/addr';
import { bridgeAdd, bridgeSet, bridgePortSet, deleteLink, firstLink, linkKind, linkSet, showDev, vethAdd, type IpLink } from '../iproute/link';
import { ensureSysctl, trySysctl } from '../iproute/sysctl';
import { Prefix } from '../net/ip';
import { randomMac } from '../net/mac';
import type { BridgeConfig } from './config';
import type { AddressPlan, GatewayAddr } from './plan';
import { vlanGatewayName, vlanGatewayPeerName } from './names';
import { kernelError } from './kernel-error';
import type { Undo } from './undo';
import { mark } from './trace';

/** The host end of this attachment's veth is already there: it was added and not deleted. */
export class AttachmentExistsError extends CniError {
  constructor(hostVeth: string) {
    super(ErrorCode.Internal, `host veth ${hostVeth} already exists: this attachment (container ID and CNI_IFNAME) was added before and not deleted`);
  }
}

export interface HostState {
  bridge: IpLink;
  veth: IpLink;
  /** The link holding a VLAN's gateway address (vlan with isGateway). */
  vlanGateway?: IpLink;
}

export interface HostRequest {
  cfg: BridgeConfig;
  plan: AddressPlan | undefined;
  hostVeth: string;
  /** The host veth's alias (names.ts vethAlias): how GC finds it. */
  alias: string;
  /** The container's namespace and interface: the veth's peer. */
  netns: string;
  ifname: string;
  containerMac: string | undefined;
}

/** The bridge, the veth pair and the gateway addresses; what this call created is registered in `undo`. */
export async function setupHost(r: HostRequest, undo: Undo): Promise<HostState> {
  const { cfg, hostVeth, netns, ifname } = r;
  const vlanFiltering = cfg.vlan > 0 || cfg.vlanTrunk.length > 0;
  const vlanGw = cfg.isGateway && cfg.vlan > 0 ? vlanGatewayName(cfg.bridge, cfg.vlan) : undefined;
  const gwDev = vlanGw ?? cfg.bridge;
  const gateways = r.plan?.gateways ?? [];
  const vlanHint = (msg: string) =>
    vlanFiltering && /not supported/i.test(msg)
      ? ' (VLAN filtering, needed by "vlan"/"vlanTrunk", requires a kernel built with CONFIG_BRIDGE_VLAN_FILTERING)'
      : '';
  const failed = (e: unknown) => kernelError(`setting up bridge "${cfg.bridge}" and veth ${hostVeth}`, e);
  const mtu = cfg.mtu || undefined;

  // VLAN filtering is switched on by its own line in step 2 rather than at
  // creation: if the kernel lacks it, creation still succeeds, so the `master`
  // words of step 2 name an existing bridge (ip aborts the whole batch on a
  // `master` it cannot resolve) and the failure is reported on its own line.
  const first = new Batch('ip');
  const create = first.add(bridgeAdd(cfg.bridge, { mtu, mac: randomMac() }));
  const existing = first.query(showDev(cfg.bridge), firstLink);
  const gwBefore = vlanGw && gateways.length ? first.query(showDev(vlanGw), firstLink) : existing;
  // (A failing run means ip itself gave up: the process is gone, nothing was changed.)
  await first.run({ json: true, details: true }).catch((e) => {
    throw failed(e);
  });
  // A refusal here leaves the name as it was.
  if (create.error !== undefined && !isExists(create.error)) {
    throw new CniError(ErrorCode.Internal, `failed to create bridge "${cfg.bridge}": ${create.error}${vlanHint(create.error)}`);
  }
  if (!existing.output) throw new CniError(ErrorCode.Internal, `bridge "${cfg.bridge}" not found after creating it: ${existing.error}`);
  if (linkKind(existing.output) !== 'bridge') {
    throw new CniError(ErrorCode.InvalidNetworkConfig, `"${cfg.bridge}" (field "bridge") already exists but is not a bridge (it is a ${linkKind(existing.output) ?? 'link of unknown kind'})`);
  }
  const before = gwBefore.output?.addr_info ?? [];

  const b = new Batch('ip');
  if (vlanFiltering) b.add(bridgeSet(cfg.bridge, { vlanFiltering: true }));
  b.add(linkSet(cfg.bridge, { up: true, ...(cfg.promiscMode ? { promisc: true } : {}) }));
  const veth = b.add(vethAdd({ name: hostVeth, peer: ifname, peerNetns: netns, mtu, peerMac: r.containerMac, master: cfg.bridge, up: true }));
  b.add(linkSet(hostVeth, { alias: r.alias }));
  if (cfg.hairpinMode || cfg.portIsolation) {
    b.add(bridgePortSet(hostVeth, { ...(cfg.hairpinMode ? { hairpin: true } : {}), ...(cfg.portIsolation ? { isolated: true } : {}) }));
  }
  const gwPeer = vlanGw ? b.add(vethAdd({ name: vlanGatewayPeerName(cfg.bridge, cfg.vlan), peer: vlanGw, master: cfg.bridge, up: true, mtu })) : undefined;
  if (vlanGw) b.add(linkSet(vlanGw, { up: true }));
  // The gateway address is ours by configuration and shared by every port: DAD
  // on it would only keep the first pod from its IPv6 gateway for a second or two.
  // IPv4 gets its broadcast address, as Go's netlink gives it (brd +).
  for (const g of gateways) b.add(addrReplace(gwDev, g.cidr, g.family === 6 ? { nodad: true } : { broadcast: '+' }));
  const bridgeNow = b.query(showDev(cfg.bridge), firstLink);
  const vethNow = b.query(showDev(hostVeth), firstLink);
  const gwNow = vlanGw ? b.query(showDev(vlanGw), firstLink) : bridgeNow;

  await b.run({ json: true, details: true }).catch((e) => {
    // ip gave up before finishing (it exits on words it cannot resolve). That
    // happens parsing a line, before the veth line has run, so nothing to undo.
    throw failed(e);
  });
  mark('host');
  if (veth.error === undefined) undo.push(() => deleteLink(hostVeth));
  // The VLAN gateway's veth pair, when this call made it (its address goes with it).
  if (gwPeer && gwPeer.error === undefined) undo.push(() => deleteLink(vlanGatewayPeerName(cfg.bridge, cfg.vlan)));

  if (!bridgeNow.output) throw new CniError(ErrorCode.Internal, `bridge "${cfg.bridge}" not found: ${bridgeNow.error}`);
  if (veth.error !== undefined) {
    if (isExists(veth.error)) {
      if (vethNow.output) throw new AttachmentExistsError(hostVeth);
      throw new CniError(ErrorCode.Internal, `an interface named ${ifname} (CNI_IFNAME) already exists in ${netns}`);
    }
    throw new CniError(ErrorCode.Internal, `failed to create the veth pair ${hostVeth} / ${ifname} (peer in ${netns}) on bridge "${cfg.bridge}": ${veth.error}`);
  }
  if (gwPeer && gwPeer.error !== undefined && !isExists(gwPeer.error)) {
    throw new CniError(ErrorCode.Internal, `failed to create the VLAN gateway link ${vlanGw}: ${gwPeer.error}`);
  }
  // Every other line (up, port flags, gateway addresses, reads) must have worked.
  const other = b.failed().find((h) => h !== veth && h !== gwPeer);
  if (other) throw new CniError(ErrorCode.Internal, `ip ${other.line.join(' ')}: ${other.error}${vlanHint(other.error!)}`);

  if (gateways.length) await resolveGatewayConflicts(cfg, gwDev, gateways, before, gwNow.output?.addr_info ?? []);
  return { bridge: bridgeNow.output, veth: vethNow.output!, vlanGateway: vlanGw ? gwNow.output : undefined };
}

/**
 * The reference's rule: the bridge may hold other IPv6 addresses whose subnets
 * do not overlap ours, but any other IPv4 address (or overlapping IPv6 one) is
 * an error unless forceAddress, which removes it.
 */
async function resolveGatewayConflicts(cfg: BridgeConfig, dev: string, gateways: GatewayAddr[], before: AddrInfo[], after: AddrInfo[]): Promise<void> {
  const ours = new Set(gateways.map((g) => g.cidr));
  const families = new Set(gateways.map((g) => (g.family === 4 ? 'inet' : 'inet6')));
  const conflicts = after.filter((a) => {
    const cidr = addrCidr(a);
    // Only a gateway's own family can conflict (and the bridge's fe80:: is then not even parsed).
    if (ours.has(cidr) || !families.has(a.family)) return false;
    const p = Prefix.parse(cidr);
    if (!p) return false;
    return gateways.some((g) => {
      if (g.family !== p.family) return false;
      if (g.family === 4) return true;
      return g.prefix.contains(p.address) || p.contains(g.prefix.address);
    });
  });
  if (conflicts.length === 0) return;
  const list = conflicts.map(addrCidr);
  if (cfg.forceAddress) {
    const b = new Batch('ip');
    for (const c of list) b.add(addrDel(dev, c));
    const [bad] = (await b.run()).failed();
    if (bad) throw new CniError(ErrorCode.Internal, `failed to remove ${list.join(', ')} from "${dev}" (forceAddress): ${bad.error}`);
    return;
  }
  // Leave the bridge as it was: take back the gateway addresses this call added.
  const had = new Set(before.map(addrCidr));
  const added = new Batch('ip');
  for (const g of gateways) if (!had.has(g.cidr)) added.add(addrDel(dev, g.cidr));
  if (added.size) await added.run();
  throw new CniError(
    ErrorCode.InvalidNetworkConfig,
    `"${dev}" already has an IP address different from ${gateways.map((g) => g.cidr).join(', ')}: ${list.join(', ')} (set "forceAddress" to replace it)`,
  );
}

/**
 * The host's own sysctls, plain writes with no process: no router
 * advertisements taken on the bridge or the port, and forwarding on for the
 * families the bridge is a gateway of.
 */
export function setHostSysctls(cfg: BridgeConfig, plan: AddressPlan | undefined, hostVeth: string): void {
  trySysctl(`net/ipv6/conf/${cfg.bridge}/accept_ra`, '0');
  trySysctl(`net/ipv6/conf/${hostVeth}/accept_ra`, '0');
  if (!plan || !cfg.isGateway) return;
  try {
    if (plan.gateways.some((g) => g.family === 4)) ensureSysctl('net/ipv4/ip_forward', '1');
    if (plan.gateways.some((g) => g.family === 6)) ensureSysctl('net/ipv6/conf/all/forwarding', '1');
  } catch (err) {
    throw new CniError(ErrorCode.IOFailure, `failed to enable forwarding: ${(err as Error).message}`);
  }
}
