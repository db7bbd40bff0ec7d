// CHECK: the attachment still looks the way ADD left it (prevResult): the
// bridge, both veth ends (peers of each other, the host end on the bridge),
// the container's addresses and routes, and the masquerade rules. Reads run
// side by side: one `ip -batch` per namespace, the IPAM's CHECK, one rule
// listing. The first drift found is the error, naming what drifted.
import { CniError, ErrorCode, invalidConfig } from '../cni/errors';
import { parseResult, type Interface, type Result } from '../cni/result';
import type { Request } from '../cni/skel';
import { Batch } from '../iproute/batch';
import { netnsProblem } from '../iproute/netns';
import { firstLink, isPromisc, linkKind, showDev, type IpLink } from '../iproute/link';
import { linkNameProblem } from '../net/ifname';
import { MAIN_TABLE, routeDstCidr, routeShowAll, routeTableId, type IpRoute } from '../iproute/route';
import { IP, Prefix } from '../net/ip';
import { parseBridgeConfig, type BridgeConfig } from './config';
import { planIpam, callIpam } from './ipam';
import { attachmentTags, hostVethName } from './names';
import { kernelError } from './kernel-error';

const drift = (msg: string) => new CniError(ErrorCode.Internal, msg);

export async function check(req: Request): Promise<void> {
  const cfg = parseBridgeConfig(req.conf, req.inv.args, 'CHECK');
  const { containerId, ifname, netns } = req.inv;
  const problem = linkNameProblem(ifname);
  if (problem) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_IFNAME ${JSON.stringify(ifname)} is invalid: ${problem}`);
  const notNetns = netnsProblem(netns);
  if (notNetns) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS ${netns} ${notNetns}`);
  if (req.conf.prevResult === undefined || req.conf.prevResult === null) throw invalidConfig('CHECK needs the field "prevResult"');
  const prev = parseResult(req.conf.prevResult);
  const ipam = cfg.ipamType ? planIpam(cfg.ipamType, req.inv.path) : undefined;

  const ifaces = prev.interfaces ?? [];
  const brIf = ifaces.find((i) => i.name === cfg.bridge && !i.sandbox);
  const contIdx = ifaces.findIndex((i) => i.name === ifname && i.sandbox === netns);
  if (contIdx < 0) {
    const named = ifaces.find((i) => i.name === ifname);
    throw drift(
      named
        ? `prevResult's interface ${ifname} is in sandbox ${JSON.stringify(named.sandbox ?? '')}, not CNI_NETNS ${netns}`
        : `prevResult has no interface ${ifname} with sandbox ${netns}`,
    );
  }
  const contIf = ifaces[contIdx];
  // The host end as prevResult names it (an attachment made by another bridge
  // implementation has its own name), else the name ADD derives.
  const vethIf = ifaces.find((i, k) => k !== contIdx && !i.sandbox && i !== brIf && !i.name.startsWith(`${cfg.bridge}.`));
  const hostVeth = vethIf?.name ?? hostVethName(containerId, ifname);

  const expectIps = (prev.ips ?? []).filter((ip) => ip.interface === undefined || ip.interface === contIdx);
  const tags = attachmentTags(cfg.network, containerId, ifname);
  const hostSide = new Batch('ip');
  const bridgeRead = hostSide.query(showDev(cfg.bridge), firstLink);
  const vethRead = hostSide.query(showDev(hostVeth), firstLink);
  const contSide = new Batch('ip');
  const contLinkRead = contSide.query(showDev(ifname), firstLink);
  const routesRead = contSide.query(routeShowAll(), (json) => (json as IpRoute[] | undefined) ?? []);
  const [ipamCheck, hostRead, contRead, masqProblem] = await Promise.allSettled([
    ipam ? callIpam(ipam, 'CHECK', req) : Promise.resolve(undefined),
    hostSide.run({ json: true, details: true }),
    contSide.run({ json: true, details: true, netns }),
    cfg.ipMasq && expectIps.length
      ? import('../iproute/masq').then(({ masqCheck }) =>
          masqCheck(cfg.ipMasqBackend, tags.attTag, expectIps.map((i) => normalizeIp(i.address.split('/')[0]))),
        )
      : Promise.resolve(undefined),
  ]);
  if (ipamCheck.status === 'rejected') throw ipamCheck.reason;
  if (hostRead.status === 'rejected') throw kernelError('reading the host links', hostRead.reason);
  if (contRead.status === 'rejected') throw kernelError(`reading ${ifname} in ${netns}`, contRead.reason);

  const bridge = bridgeRead.output;
  const veth = vethRead.output;
  const cont = contLinkRead.output;
  const routes = routesRead.output ?? [];

  checkBridge(cfg, bridge, brIf);
  if (!cont) throw drift(`container interface ${ifname} not found in ${netns}`);
  if (linkKind(cont) !== 'veth') throw drift(`container interface ${ifname} is a ${linkKind(cont) ?? 'link of unknown kind'}, not a veth`);
  macMatches(contIf, cont, `container interface ${ifname}`);
  if (!veth) throw drift(`host veth ${hostVeth} of ${ifname} not found`);
  if (linkKind(veth) !== 'veth') throw drift(`host link ${hostVeth} is not a veth`);
  if (veth.master !== cfg.bridge) throw drift(`host veth ${hostVeth} is not attached to bridge "${cfg.bridge}" (master: ${veth.master ?? 'none'})`);
  if (veth.link_index !== cont.ifindex || cont.link_index !== veth.ifindex) {
    throw drift(`host veth ${hostVeth} is not the peer of ${ifname} in ${netns}`);
  }
  if (vethIf) macMatches(vethIf, veth, `host veth ${hostVeth}`);

  checkAddresses(cont, expectIps.map((i) => i.address), ifname);
  checkRoutes(prev, routes, ifname);
  if (masqProblem.status === 'rejected') throw kernelError('reading masquerade rules', masqProblem.reason);
  if (masqProblem.value) throw drift(masqProblem.value);
}

function checkBridge(cfg: BridgeConfig, bridge: IpLink | undefined, brIf: Interface | undefined): void {
  if (!bridge) throw drift(`bridge "${cfg.bridge}" not found`);
  if (linkKind(bridge) !== 'bridge') throw drift(`"${cfg.bridge}" is not a bridge any more (it is a ${linkKind(bridge) ?? 'link of unknown kind'})`);
  if (brIf) macMatches(brIf, bridge, `bridge "${cfg.bridge}"`);
  if (isPromisc(bridge) !== cfg.promiscMode) {
    throw drift(`bridge "${cfg.bridge}" promiscuous mode is ${isPromisc(bridge) ? 'on' : 'off'}, config "promiscMode" says ${cfg.promiscMode ? 'on' : 'off'}`);
  }
}

function macMatches(expected: Interface, link: IpLink, what: string): void {
  if (expected.mac && link.address && expected.mac.toLowerCase() !== link.address.toLowerCase()) {
    throw drift(`${what} has MAC ${link.address}, prevResult says ${expected.mac}`);
  }
}

function normalizeIp(text: string): string {
  return IP.parse(text)?.toString() ?? text;
}

function checkAddresses(link: IpLink, expected: string[], ifname: string): void {
  const have = new Set((link.addr_info ?? []).map((a) => `${normalizeIp(a.local)}/${a.prefixlen}`));
  for (const cidr of expected) {
    const p = Prefix.parse(cidr);
    const want = p ? `${p.address}/${p.length}` : cidr;
    if (!have.has(want)) throw drift(`address ${cidr} from prevResult is missing on ${ifname} (it has ${[...have].join(', ') || 'none'})`);
  }
}

function checkRoutes(prev: Result, routes: IpRoute[], ifname: string): void {
  for (const r of prev.routes ?? []) {
    const dst = Prefix.parse(r.dst);
    if (!dst) throw drift(`prevResult route ${JSON.stringify(r.dst)} is not a CIDR`);
    const fam = dst.family;
    // ADD puts a route with a "table" (spec 1.1) into that table, the others into main.
    const table = r.table ?? MAIN_TABLE;
    const found = routes.some((k) => {
      if (routeTableId(k.table) !== table) return false;
      const kDst = Prefix.parse(routeDstCidr(k.dst, fam));
      if (!kDst || kDst.toString() !== dst.toString()) return false;
      if (k.dev !== undefined && k.dev !== ifname) return false;
      if (k.gateway && k.gateway.includes(':') !== (fam === 6)) return false;
      return !r.gw || normalizeIp(k.gateway ?? '') === normalizeIp(r.gw);
    });
    if (!found) {
      const where = r.table === undefined ? '' : ` table ${r.table}`;
      throw drift(`route to ${r.dst}${r.gw ? ` via ${r.gw}` : ''}${where} from prevResult is missing in the container (dev ${ifname})`);
    }
  }
}
