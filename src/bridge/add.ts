// ADD: bridge, veth pair, IPAM, addresses, routes, gateway, masquerade.
//
// Processes (L3 with a gateway): IPAM runs in this process when it is our
// host-local, then
//   1. two `ip -batch` in the host: the bridge (created, or an existing link
//      read: nothing existing is touched before it is known to be a bridge),
//      then the veth pair with its peer created directly in the container
//      namespace and this end enslaved, port flags, gateway address, and the
//      reads for the result;
//   2. `nsenter sysctl` in the container (DAD, arp_notify: before link up);
//   3. one `ip -batch` in the container: addresses, link up, routes, read MAC;
// with masquerade, VLAN and spoof-check setup running beside 2 and 3.
// Anything failing after IPAM undoes what this call made, then releases IPAM.
import { existsSync } from 'node:fs';
import { CniError, ErrorCode } from '../cni/errors';
import type { Interface, Result } from '../cni/result';
import type { Request } from '../cni/skel';
import { runBatch, isExists, isBatchSafe, type Line, type BatchResult } from '../iproute/batch';
import { bridgeAdd, bridgeSet, bridgePortSet, firstLink, linkDel, linkKind, linkSet, showDev, vethAdd, type IpLink } from '../iproute/link';
import { randomMac } from '../net/mac';
import { linkNameProblem } from '../net/ifname';
import { settleAll } from '../util/settle';
import { addrAdd, addrDel, addrReplace, type AddrInfo } from '../iproute/addr';
import { routeAppend } from '../iproute/route';
import { setSysctlsIn, trySysctl, ensureSysctl } from '../iproute/sysctl';
import { vlanAdd, vlanDel, vlanRanges } from '../iproute/vlan';
import { Prefix } from '../net/ip';
import { parseBridgeConfig, type BridgeConfig } from './config';
import { planIpam, callIpam, type IpamPlan } from './ipam';
import { familyOfText, planAddresses, routeGateway, type AddressPlan, type GatewayAddr } from './plan';
import { attachmentTags, hostVethName, vlanGatewayName, vlanGatewayPeerName } from './names';
import { kernelError, masqLabel } from './common';
import { mark } from './trace';

/** How long `enabledad` waits for IPv6 duplicate address detection. */
const DAD_TIMEOUT_MS = 10_000;
const DAD_POLL_MS = 50;

type Undo = () => Promise<unknown>;

export async function add(req: Request): Promise<Result> {
  mark('add');
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'ADD');
  const { containerId, ifname, netns } = req.inv;
  checkInvocation(ifname, netns);
  // Resolve the IPAM plugin before anything changes: a missing one is a config error.
  const ipam = cfg.ipamType ? planIpam(cfg.ipamType, req.inv.path) : undefined;

  const undo: Undo[] = [];
  let attachmentExists = false;
  try {
    return await addSteps(req, cfg, ipam, undo);
  } catch (err) {
    for (const step of undo.reverse()) {
      try {
        await step();
      } catch (cleanupErr) {
        process.stderr.write(`bridge: cleanup after failed ADD: ${(cleanupErr as Error).message}\n`);
      }
    }
    throw err;
  }

  async function addSteps(req: Request, cfg: BridgeConfig, ipam: IpamPlan | undefined, undo: Undo[]): Promise<Result> {
    let plan: AddressPlan | undefined;
    let dns = cfg.dns;
    if (ipam) {
      const r = (await callIpam(ipam, 'ADD', req))!;
      mark('ipam');
      // Not when this attachment turns out to exist already: the IPAM then
      // returned the addresses it holds, which must stay with it.
      undo.push(async () => (attachmentExists ? undefined : callIpam(ipam, 'DEL', req)));
      if (!r.ips?.length) throw new CniError(ErrorCode.Internal, `IPAM plugin "${ipam.type}" returned no IP addresses`);
      plan = planAddresses(cfg, r);
      dns ??= r.dns;
    }

    const hostVeth = hostVethName(containerId, ifname);
    // The spoof check must know the MAC before traffic flows: choose it rather than read it.
    const containerMac = cfg.mac ?? (cfg.macspoofchk ? randomMac() : undefined);
    const host = await setupHost(cfg, plan, hostVeth, netns, ifname, containerMac, undo).catch((e) => {
      if (e instanceof AttachmentExistsError) attachmentExists = true;
      throw e;
    });

    // The rest touches separate things and runs side by side.
    const tags = attachmentTags(cfg.network, containerId, ifname);
    const tasks: Promise<unknown>[] = [];
    let settled: Promise<unknown[]> | undefined;
    try {
      tasks.push(configureContainer(cfg, plan, netns, ifname));
      if (cfg.vlan > 0 || cfg.vlanTrunk.length > 0) tasks.push(setupVlans(cfg, host, hostVeth));
      if (cfg.ipMasq && plan && plan.masq.length > 0) {
        tasks.push(
          (async () => {
            const { masqAdd, masqDel } = await import('../iproute/masq');
            undo.push(() => masqDel(cfg.ipMasqBackend, tags.attTag));
            await masqAdd(cfg.ipMasqBackend, { ...tags, label: masqLabel(cfg.network, containerId, ifname) }, plan.masq).catch((e) => {
              throw kernelError(`ipMasq (${cfg.ipMasqBackend})`, e);
            });
          })(),
        );
      }
      if (cfg.macspoofchk) {
        tasks.push(
          (async () => {
            const { spoofchkAdd, spoofchkDel } = await import('../iproute/spoofchk');
            undo.push(() => spoofchkDel(tags, hostVeth));
            await spoofchkAdd(tags, hostVeth, containerMac!).catch((e) => {
              throw kernelError('macspoofchk', e);
            });
          })(),
        );
      }
      // Sysctls of this namespace are plain writes, no process.
      trySysctl(`net/ipv6/conf/${cfg.bridge}/accept_ra`, '0');
      trySysctl(`net/ipv6/conf/${hostVeth}/accept_ra`, '0');
      if (plan && cfg.isGateway) enableForwarding(plan);
    } finally {
      // Even when a step above threw: the rollback must not start while tasks
      // still run (they would change things after it, or register their undo too late).
      settled = settleAll(tasks);
      await settled.catch(() => {});
    }
    const [contLink] = (await settled) as [IpLink];
    mark('done');

    const interfaces: Interface[] = [
      { name: cfg.bridge, mac: host.bridge.address },
      { name: hostVeth, mac: host.veth.address },
      { name: ifname, mac: contLink.address, sandbox: netns },
    ];
    if (host.vlanGateway) interfaces.push({ name: host.vlanGateway.ifname, mac: host.vlanGateway.address });
    const result: Result = { interfaces };
    if (plan) {
      result.ips = plan.ips;
      if (plan.routes.length) result.routes = plan.routes;
    }
    if (dns) result.dns = dns;
    return result;

    function enableForwarding(p: AddressPlan): void {
      try {
        if (p.gateways.some((g) => g.family === 4)) ensureSysctl('net/ipv4/ip_forward', '1');
        if (p.gateways.some((g) => g.family === 6)) ensureSysctl('net/ipv6/conf/all/forwarding', '1');
      } catch (err) {
        throw new CniError(ErrorCode.IOFailure, `failed to enable forwarding: ${(err as Error).message}`);
      }
    }

    async function setupVlans(c: BridgeConfig, h: HostState, port: string): Promise<void> {
      const pvid = Number(h.bridge.linkinfo?.info_data?.vlan_default_pvid ?? 1) || 1;
      const portLines = (dev: string): Line[] => [
        ...(c.preserveDefaultVlan ? [] : [vlanDel(dev, pvid)]),
        ...(c.vlan > 0 ? [vlanAdd(dev, c.vlan, { pvid: true, untagged: true })] : []),
        ...vlanRanges(c.vlanTrunk).map((r) => vlanAdd(dev, r)),
      ];
      // The gateway's port too, on every ADD and not only when this call created
      // it: an earlier ADD may have created it and failed before its VLANs were
      // set. Adding a VLAN a port already has changes nothing.
      const lines = [...portLines(port), ...(h.vlanGateway ? portLines(vlanGatewayPeerName(c.bridge, c.vlan)) : [])];
      const res = await runBatch('bridge', lines);
      res.errors.forEach((msg, i) => {
        // The default VLAN may already be gone from the port.
        if (msg !== undefined && lines[i][1] !== 'del') {
          const hint = /not supported/i.test(msg) ? ' (the kernel lacks CONFIG_BRIDGE_VLAN_FILTERING)' : '';
          throw new CniError(ErrorCode.Internal, `failed to set up VLANs on ${lines[i][3]}: bridge ${lines[i].join(' ')}: ${msg}${hint}`);
        }
      });
    }
  }
}

function checkInvocation(ifname: string, netns: string): void {
  const problem = linkNameProblem(ifname);
  if (problem) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_IFNAME ${JSON.stringify(ifname)} is invalid: ${problem}`);
  if (!isBatchSafe([netns])) {
    throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS ${JSON.stringify(netns)} contains whitespace, a quote, a backslash or '#', which ip -batch cannot carry`);
  }
  if (!existsSync(netns)) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS ${netns} does not exist`);
}

/** The host end of this attachment's veth is already there: it was added and not deleted. */
class AttachmentExistsError extends CniError {
  constructor(hostVeth: string) {
    super(ErrorCode.Internal, `host veth ${hostVeth} already exists: this attachment (container ID and CNI_IFNAME) was added before and not deleted`);
  }
}

interface HostState {
  bridge: IpLink;
  veth: IpLink;
  /** The link holding a VLAN's gateway address (vlan with isGateway). */
  vlanGateway?: IpLink;
}

/**
 * The host side, in two `ip -batch` processes:
 *   1. create the bridge if it is missing, and read what the name holds now
 *      (and the VLAN gateway link's addresses): nothing that already exists
 *      is touched before its kind is known;
 *   2. only on a bridge: bring it up, the veth pair, port flags, the gateway
 *      addresses, and the reads for the result.
 */
async function setupHost(
  cfg: BridgeConfig,
  plan: AddressPlan | undefined,
  hostVeth: string,
  netns: string,
  ifname: string,
  containerMac: string | undefined,
  undo: Undo[],
): Promise<HostState> {
  const vlanFiltering = cfg.vlan > 0 || cfg.vlanTrunk.length > 0;
  const vlanGw = cfg.isGateway && cfg.vlan > 0 ? vlanGatewayName(cfg.bridge, cfg.vlan) : undefined;
  const gwDev = vlanGw ?? cfg.bridge;
  const gateways = plan?.gateways ?? [];
  const vlanHint = (msg: string) =>
    vlanFiltering && /not supported/i.test(msg)
      ? ' (VLAN filtering, needed by "vlan"/"vlanTrunk", requires a kernel built with CONFIG_BRIDGE_VLAN_FILTERING)'
      : '';
  const failed = (e: unknown) => kernelError(`setting up bridge "${cfg.bridge}" and veth ${hostVeth}`, e);

  // VLAN filtering is switched on by its own line in step 2 rather than at
  // creation: if the kernel lacks it, creation still succeeds, so the `master`
  // words of step 2 name an existing bridge (ip aborts the whole batch on a
  // `master` it cannot resolve) and the failure is reported on its own line.
  const first: Line[] = [bridgeAdd(cfg.bridge, { mtu: cfg.mtu || undefined, mac: randomMac() }), showDev(cfg.bridge)];
  if (vlanGw && gateways.length) first.push(showDev(vlanGw));
  // (A failing step means ip itself gave up: the process is gone, nothing was changed.)
  const found = await runBatch('ip', first, { json: true, details: true }).catch((e) => {
    throw failed(e);
  });
  // A refusal here leaves the name as it was.
  const existing = firstLink(found.outputs[1]);
  const addErr = found.errors[0];
  if (addErr !== undefined && !isExists(addErr)) {
    throw new CniError(ErrorCode.Internal, `failed to create bridge "${cfg.bridge}": ${addErr}${vlanHint(addErr)}`);
  }
  if (!existing) throw new CniError(ErrorCode.Internal, `bridge "${cfg.bridge}" not found after creating it: ${found.errors[1]}`);
  if (linkKind(existing) !== 'bridge') {
    throw new CniError(ErrorCode.InvalidNetworkConfig, `"${cfg.bridge}" (field "bridge") already exists but is not a bridge (it is a ${linkKind(existing) ?? 'link of unknown kind'})`);
  }
  const before = (vlanGw ? firstLink(found.outputs[2]) : existing)?.addr_info ?? [];

  const lines: Line[] = [];
  const at = (line: Line) => lines.push(line) - 1;
  if (vlanFiltering) at(bridgeSet(cfg.bridge, { vlanFiltering: true }));
  at(linkSet(cfg.bridge, { up: true, ...(cfg.promiscMode ? { promisc: true } : {}) }));
  const iVeth = at(
    vethAdd({ name: hostVeth, peer: ifname, peerNetns: netns, mtu: cfg.mtu || undefined, peerMac: containerMac, master: cfg.bridge, up: true }),
  );
  if (cfg.hairpinMode || cfg.portIsolation) {
    at(bridgePortSet(hostVeth, { ...(cfg.hairpinMode ? { hairpin: true } : {}), ...(cfg.portIsolation ? { isolated: true } : {}) }));
  }
  let iVlanGw = -1;
  if (vlanGw) {
    iVlanGw = at(vethAdd({ name: vlanGatewayPeerName(cfg.bridge, cfg.vlan), peer: vlanGw, master: cfg.bridge, up: true, mtu: cfg.mtu || undefined }));
    at(linkSet(vlanGw, { up: true }));
  }
  // The gateway address is ours by configuration and shared by every port: DAD
  // on it would only keep the first pod from its IPv6 gateway for a second or two.
  // IPv4 gets its broadcast address, as Go's netlink gives it (brd +).
  for (const g of gateways) at(addrReplace(gwDev, g.cidr, g.family === 6 ? { nodad: true } : { broadcast: '+' }));
  const iShowBridge = at(showDev(cfg.bridge));
  const iShowVeth = at(showDev(hostVeth));
  const iShowGw = vlanGw ? at(showDev(vlanGw)) : -1;

  const res = await runBatch('ip', lines, { json: true, details: true }).catch((e) => {
    // ip gave up before finishing (it exits on words it cannot resolve). That
    // happens parsing a line, before the veth line has run, so nothing to undo.
    throw failed(e);
  });
  mark('host');
  const vethMade = res.errors[iVeth] === undefined;
  if (vethMade) undo.push(() => runBatch('ip', [linkDel(hostVeth)]));
  // The VLAN gateway's veth pair, when this call made it (its address goes with it).
  const vlanGatewayCreated = iVlanGw >= 0 && res.errors[iVlanGw] === undefined;
  if (vlanGatewayCreated) undo.push(() => runBatch('ip', [linkDel(vlanGatewayPeerName(cfg.bridge, cfg.vlan))]));

  const bridge = firstLink(res.outputs[iShowBridge]);
  const err = (i: number) => res.errors[i];
  if (!bridge) throw new CniError(ErrorCode.Internal, `bridge "${cfg.bridge}" not found: ${err(iShowBridge)}`);
  if (!vethMade) {
    const msg = err(iVeth)!;
    if (isExists(msg)) {
      if (firstLink(res.outputs[iShowVeth])) {
        throw new AttachmentExistsError(hostVeth);
      }
      throw new CniError(ErrorCode.Internal, `an interface named ${ifname} (CNI_IFNAME) already exists in ${netns}`);
    }
    throw new CniError(ErrorCode.Internal, `failed to create the veth pair ${hostVeth} / ${ifname} (peer in ${netns}) on bridge "${cfg.bridge}": ${msg}`);
  }
  if (iVlanGw >= 0 && !vlanGatewayCreated && !isExists(err(iVlanGw))) {
    throw new CniError(ErrorCode.Internal, `failed to create the VLAN gateway link ${vlanGw}: ${err(iVlanGw)}`);
  }
  // Every other line (up, port flags, gateway addresses, reads) must have worked.
  res.errors.forEach((msg, i) => {
    if (msg === undefined || i === iVeth || i === iVlanGw) return;
    throw new CniError(ErrorCode.Internal, `ip ${lines[i].join(' ')}: ${msg}${vlanHint(msg)}`);
  });
  const veth = firstLink(res.outputs[iShowVeth])!;

  if (gateways.length) {
    const gwLink = firstLink(res.outputs[vlanGw ? iShowGw : iShowBridge])!;
    await resolveGatewayConflicts(cfg, gwDev, gateways, before, gwLink.addr_info ?? []);
  }
  return { bridge, veth, vlanGateway: vlanGw ? firstLink(res.outputs[iShowGw]) : undefined };
}

/**
 * The reference's rule: the bridge may hold other IPv6 addresses whose subnets
 * do not overlap ours, but any other IPv4 address (or overlapping IPv6 one) is
 * an error unless forceAddress, which removes it.
 */
async function resolveGatewayConflicts(cfg: BridgeConfig, dev: string, gateways: GatewayAddr[], before: AddrInfo[], after: AddrInfo[]): Promise<void> {
  const ours = new Set(gateways.map((g) => g.cidr));
  const conflicts = after.filter((a) => {
    const cidr = `${a.local}/${a.prefixlen}`;
    if (ours.has(cidr)) return false;
    const p = Prefix.parse(cidr);
    if (!p) return false;
    return gateways.some((g) => {
      if (g.family !== p.family) return false;
      if (g.family === 4) return true;
      return g.prefix.contains(p.address) || p.contains(g.prefix.address);
    });
  });
  if (conflicts.length === 0) return;
  const list = conflicts.map((a) => `${a.local}/${a.prefixlen}`);
  if (cfg.forceAddress) {
    const res = await runBatch('ip', list.map((c) => addrDel(dev, c)));
    const bad = res.errors.find((e) => e !== undefined);
    if (bad) throw new CniError(ErrorCode.Internal, `failed to remove ${list.join(', ')} from "${dev}" (forceAddress): ${bad}`);
    return;
  }
  // Leave the bridge as it was: take back the gateway addresses this call added.
  const had = new Set(before.map((a) => `${a.local}/${a.prefixlen}`));
  const added = gateways.filter((g) => !had.has(g.cidr)).map((g) => addrDel(dev, g.cidr));
  if (added.length) await runBatch('ip', added);
  throw new CniError(
    ErrorCode.InvalidNetworkConfig,
    `"${dev}" already has an IP address different from ${gateways.map((g) => g.cidr).join(', ')}: ${list.join(', ')} (set "forceAddress" to replace it)`,
  );
}

/** Container side: sysctls, then one batch with addresses, link up, routes and the read of the link. */
async function configureContainer(cfg: BridgeConfig, plan: AddressPlan | undefined, netns: string, ifname: string): Promise<IpLink> {
  const lines: Line[] = [];
  if (plan) {
    const v6 = plan.families.has(6);
    mark('sysctl');
    await setSysctlsIn(netns, [
      ...(cfg.enabledad ? ([[`net/ipv6/conf/${ifname}/enhanced_dad`, '1']] as const) : []),
      [`net/ipv6/conf/${ifname}/accept_dad`, cfg.enabledad ? '1' : '0'],
      [`net/ipv4/conf/${ifname}/arp_notify`, '1'],
      ...(v6 ? ([[`net/ipv6/conf/lo/disable_ipv6`, '0'], [`net/ipv6/conf/${ifname}/disable_ipv6`, '0']] as const) : []),
    ]).catch((e) => {
      throw kernelError(`sysctls of ${ifname} in ${netns}`, e);
    });
    // IPv4 with its broadcast address (as the reference: Go's netlink sets it).
    for (const ip of plan.ips) lines.push(addrAdd(ifname, ip.address, familyOfText(ip.address) === 4 ? { broadcast: '+' } : {}));
  }
  if (!cfg.disableContainerInterface) lines.push(linkSet(ifname, { up: true }));
  const waitDad = !!plan && cfg.enabledad && plan.families.has(6);
  const routeLines = plan ? plan.routes.map((r) => routeAppend({ dst: r.dst, gw: routeGateway(r, plan), dev: ifname, mtu: r.mtu, advmss: r.advmss, metric: r.priority, table: r.table, scope: r.scope })) : [];
  if (!waitDad) lines.push(...routeLines);
  const iShow = lines.push(showDev(ifname)) - 1;

  mark('container');
  const res = await runBatch('ip', lines, { json: true, details: true, netns });
  failOn(res, lines, `configuring ${ifname} in ${netns}`);
  let link = firstLink(res.outputs[iShow])!;
  if (waitDad) {
    link = await settleDad(netns, ifname, link);
    if (routeLines.length) failOn(await runBatch('ip', routeLines, { netns }), routeLines, `adding routes to ${ifname} in ${netns}`);
  }
  return link;
}

function failOn(res: BatchResult, lines: readonly Line[], what: string): void {
  const i = res.firstError;
  if (i >= 0) throw new CniError(ErrorCode.Internal, `${what}: ip ${lines[i].join(' ')}: ${res.errors[i]}`);
}

/** enabledad: waits until no IPv6 address of the link is tentative; DADFAILED is an error. */
async function settleDad(netns: string, ifname: string, first: IpLink): Promise<IpLink> {
  const deadline = Date.now() + DAD_TIMEOUT_MS;
  for (let link = first; ; ) {
    const v6 = (link.addr_info ?? []).filter((a) => a.family === 'inet6');
    const failed = v6.filter((a) => a.dadfailed);
    if (failed.length) {
      throw new CniError(
        ErrorCode.Internal,
        `IPv6 duplicate address detection failed on ${ifname} for ${failed.map((a) => `${a.local}/${a.prefixlen}`).join(', ')} (DADFAILED): another host on the bridge uses the address`,
      );
    }
    if (!v6.some((a) => a.tentative)) return link;
    if (Date.now() > deadline) {
      throw new CniError(ErrorCode.Internal, `IPv6 addresses on ${ifname} are still tentative after ${DAD_TIMEOUT_MS / 1000} s of duplicate address detection`);
    }
    await new Promise((r) => setTimeout(r, DAD_POLL_MS));
    const res = await runBatch('ip', [showDev(ifname)], { json: true, netns });
    failOn(res, [showDev(ifname)], `reading ${ifname} in ${netns}`);
    link = firstLink(res.outputs[0])!;
  }
}
