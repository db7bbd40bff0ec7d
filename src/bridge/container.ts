// ADD, container side: one `ip -batch` in the container's namespace that
// sets the sysctls (DAD, arp_notify: before the link is up), then the
// addresses, link up, the routes and the read of the link; in a named
// namespace that is one process (runBatch's `sysctls`). With enabledad, the
// routes wait until IPv6 duplicate address detection is over (a route via a
// tentative address fails).
import { CniError, ErrorCode } from '../cni/errors';
import { Batch, type BatchOptions } from '../iproute/batch';
import { addrAdd } from '../iproute/addr';
import { firstLink, linkSet, showDev, type IpLink } from '../iproute/link';
import { routeAppend } from '../iproute/route';
import type { BridgeConfig } from './config';
import { familyOfText, routeGateway, type AddressPlan } from './plan';
import { kernelError } from './kernel-error';
import { mark } from './trace';

/** How long `enabledad` waits for IPv6 duplicate address detection. */
const DAD_TIMEOUT_MS = 10_000;
const DAD_POLL_MS = 50;

/** Configures `ifname` in `netns`; returns the link as it is then (its MAC goes in the result). */
export async function configureContainer(cfg: BridgeConfig, plan: AddressPlan | undefined, netns: string, ifname: string): Promise<IpLink> {
  const b = new Batch('ip');
  const opts: BatchOptions = { json: true, details: true, netns };
  if (plan) {
    const v6 = plan.families.has(6);
    opts.sysctls = [
      ...(cfg.enabledad ? ([[`net/ipv6/conf/${ifname}/enhanced_dad`, '1']] as const) : []),
      [`net/ipv6/conf/${ifname}/accept_dad`, cfg.enabledad ? '1' : '0'],
      [`net/ipv4/conf/${ifname}/arp_notify`, '1'],
      ...(v6 ? ([[`net/ipv6/conf/lo/disable_ipv6`, '0'], [`net/ipv6/conf/${ifname}/disable_ipv6`, '0']] as const) : []),
    ];
    // IPv4 with its broadcast address (as the reference: Go's netlink sets it).
    for (const ip of plan.ips) b.add(addrAdd(ifname, ip.address, familyOfText(ip.address) === 4 ? { broadcast: '+' } : {}));
  }
  if (!cfg.disableContainerInterface) b.add(linkSet(ifname, { up: true }));
  const waitDad = !!plan && cfg.enabledad && plan.families.has(6);
  const routes = new Batch('ip');
  for (const r of plan?.routes ?? []) {
    const line = routeAppend({ dst: r.dst, gw: routeGateway(r, plan!), dev: ifname, mtu: r.mtu, advmss: r.advmss, metric: r.priority, table: r.table, scope: r.scope });
    (waitDad ? routes : b).add(line);
  }
  const link = b.query(showDev(ifname), firstLink);

  mark('container');
  await run(b, `configuring ${ifname} in ${netns}`, opts);
  if (!waitDad) return link.output!;
  const settled = await settleDad(netns, ifname, link.output!);
  if (routes.size) await run(routes, `adding routes to ${ifname} in ${netns}`, { json: true, details: true, netns });
  return settled;
}

/** Runs `b`; a failure (its first failed line, or the sysctls) is thrown as a CNI error naming `what`. */
async function run(b: Batch, what: string, opts: BatchOptions): Promise<void> {
  try {
    await b.run(opts);
    b.throwFailed();
  } catch (e) {
    throw kernelError(what, e);
  }
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
    const read = new Batch('ip');
    const now = read.query(showDev(ifname), firstLink);
    await run(read, `reading ${ifname} in ${netns}`, { json: true, details: true, netns });
    link = now.output!;
  }
}
