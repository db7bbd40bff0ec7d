// ADD: bridge, veth pair, IPAM, addresses, routes, gateway, masquerade.
//
// Processes (L3 with a gateway): IPAM runs in this process when it is our
// host-local, then
//   1. two `ip -batch` in the host (host.ts): the bridge, then the veth pair
//      with its peer created directly in the container namespace and this end
//      enslaved, port flags, gateway address, and the reads for the result;
//   2. the host's sysctls (plain writes), then one `ip -batch` in the
//      container (container.ts): sysctls, addresses, link up, routes, read MAC
//      (a named namespace: `ip -n` forking sysctl; otherwise nsenter, with
//      sysctl a process of its own);
//   3. VLANs (vlans.ts), masquerade, the spoof check, as configured.
// Every command runs synchronously, one after the other (the sync runner).
// Anything failing after IPAM undoes what this call made, then releases IPAM.
import { CniError, ErrorCode } from '../cni/errors';
import type { Interface, Result } from '../cni/result';
import type { Request } from '../cni/skel';
import { isBatchSafe } from '../iproute/batch';
import { netnsProblem } from '../iproute/netns';
import { randomMac } from '../net/mac';
import { linkNameProblem } from '../net/ifname';
import { parseBridgeConfig, type BridgeConfig } from './config';
import { planIpam, callIpam, type IpamPlan } from './ipam';
import { planAddresses, type AddressPlan } from './plan';
import { attachmentTags, hostVethName, masqLabel, vethAlias } from './names';
import { kernelError } from './kernel-error';
import { AttachmentExistsError, setHostSysctls, setupHost, type HostState } from './host';
import { configureContainer } from './container';
import { setupVlans } from './vlans';
import { Undo, type UndoStep } from './undo';
import { mark } from './trace';

export async function add(req: Request): Promise<Result> {
  mark('add');
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'ADD');
  checkInvocation(req.inv.ifname, req.inv.netns);
  // Resolve the IPAM plugin before anything changes: a missing one is a config error.
  const ipam = cfg.ipamType ? planIpam(cfg.ipamType, req.inv.path) : undefined;
  const undo = new Undo();
  try {
    return await attach(req, cfg, ipam, undo);
  } catch (err) {
    await undo.rollback((e) => process.stderr.write(`bridge: cleanup after failed ADD: ${e.message}\n`));
    throw err;
  }
}

async function attach(req: Request, cfg: BridgeConfig, ipam: IpamPlan | undefined, undo: Undo): Promise<Result> {
  const { containerId, ifname, netns } = req.inv;
  let plan: AddressPlan | undefined;
  let dns = cfg.dns;
  let releaseIpam: UndoStep | undefined;
  if (ipam) {
    const r = (await callIpam(ipam, 'ADD', req))!;
    mark('ipam');
    releaseIpam = undo.push(() => callIpam(ipam, 'DEL', req));
    if (!r.ips?.length) throw new CniError(ErrorCode.Internal, `IPAM plugin "${ipam.type}" returned no IP addresses`);
    plan = planAddresses(cfg, r);
    dns ??= r.dns;
  }

  const hostVeth = hostVethName(containerId, ifname);
  const tags = attachmentTags(cfg.network, containerId, ifname);
  // The spoof check must know the MAC before traffic flows: choose it rather than read it.
  const containerMac = cfg.mac ?? (cfg.macspoofchk ? randomMac() : undefined);
  const host = await setupHost({ cfg, plan, hostVeth, alias: vethAlias(tags), netns, ifname, containerMac }, undo).catch((e) => {
    // The attachment exists already: the IPAM returned the addresses it holds, which must stay with it.
    if (e instanceof AttachmentExistsError) releaseIpam?.cancel();
    throw e;
  });

  // The rest, one step after another: the plugin runs its commands synchronously
  // (src/cmd/bridge.ts installs iproute/sync-runner.ts), so steps could not
  // overlap anyway. A step that fails stops the ADD there; each step registers
  // its undo before it changes anything, and add() rolls back what was done.
  setHostSysctls(cfg, plan, hostVeth);
  const contLink = await configureContainer(cfg, plan, netns, ifname);
  if (cfg.vlan > 0 || cfg.vlanTrunk.length > 0) await setupVlans(cfg, host, hostVeth);
  if (cfg.ipMasq && plan && plan.masq.length > 0) {
    const { masqAdd, masqDel } = await import('../iproute/masq');
    undo.push(() => masqDel(cfg.ipMasqBackend, tags.attTag));
    await masqAdd(cfg.ipMasqBackend, { ...tags, label: masqLabel(cfg.network, containerId, ifname) }, plan.masq).catch((e) => {
      throw kernelError(`ipMasq (${cfg.ipMasqBackend})`, e);
    });
  }
  if (cfg.macspoofchk) {
    const { spoofchkAdd, spoofchkDel } = await import('../iproute/spoofchk');
    undo.push(() => spoofchkDel(tags, hostVeth));
    await spoofchkAdd(tags, hostVeth, containerMac!).catch((e) => {
      throw kernelError('macspoofchk', e);
    });
  }
  mark('done');
  return result(cfg, host, hostVeth, ifname, netns, contLink.address, plan, dns);
}

function result(cfg: BridgeConfig, host: HostState, hostVeth: string, ifname: string, netns: string, mac: string | undefined, plan: AddressPlan | undefined, dns: Result['dns']): Result {
  const interfaces: Interface[] = [
    { name: cfg.bridge, mac: host.bridge.address },
    { name: hostVeth, mac: host.veth.address },
    { name: ifname, mac, sandbox: netns },
  ];
  if (host.vlanGateway) interfaces.push({ name: host.vlanGateway.ifname, mac: host.vlanGateway.address });
  const out: Result = { interfaces };
  if (plan) {
    out.ips = plan.ips;
    if (plan.routes.length) out.routes = plan.routes;
  }
  if (dns) out.dns = dns;
  return out;
}

function checkInvocation(ifname: string, netns: string): void {
  const problem = linkNameProblem(ifname);
  if (problem) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_IFNAME ${JSON.stringify(ifname)} is invalid: ${problem}`);
  if (!isBatchSafe([netns])) {
    throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS ${JSON.stringify(netns)} contains whitespace, a quote, a backslash or '#', which ip -batch cannot carry`);
  }
  const notNetns = netnsProblem(netns);
  if (notNetns) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS ${netns} ${notNetns}`);
}
