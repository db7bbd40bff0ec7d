// The underlay: the interface VXLAN packets leave by, its address and MTU.
import { IP } from '../net/ip';
import { ipJson } from '../iproute/exec';
import { LinkState, listLinks } from '../iproute/vxlan';

export interface Underlay {
  dev: string;
  /** Source address of the tunnel (on `dev`). */
  localIP: IP;
  /** Address peers send to (the lease's PublicIP); localIP unless --public-ip says otherwise. */
  publicIP: IP;
  mtu: number;
}

const v4Addrs = (l: LinkState) => l.addrs.filter((a) => a.family === 'inet');

export async function findUnderlay(opts: { iface?: string; publicIp?: string }, netns?: string): Promise<Underlay> {
  const publicIP = opts.publicIp !== undefined ? IP.parse(opts.publicIp) : undefined;
  if (opts.publicIp !== undefined && (!publicIP || publicIP.family !== 4)) throw new Error(`--public-ip ${JSON.stringify(opts.publicIp)} is not an IPv4 address`);
  const links = await listLinks(netns);
  let link: LinkState | undefined;
  if (opts.iface) {
    link = links.find((l) => l.name === opts.iface);
    if (!link) throw new Error(`--iface ${opts.iface}: no such interface (there are: ${links.map((l) => l.name).join(', ')})`);
  } else if (publicIP) {
    link = links.find((l) => v4Addrs(l).some((a) => a.local === publicIP.toString()));
    if (!link) throw new Error(`--public-ip ${publicIP}: no interface has this address (use --iface too when it is a NAT address)`);
  } else {
    const routes = await ipJson<{ dev?: string }[]>(['-4', 'route', 'show', 'default'], { netns });
    const dev = routes.find((r) => r.dev)?.dev;
    link = dev ? links.find((l) => l.name === dev) : undefined;
    if (!link) throw new Error('no --iface or --public-ip given and there is no default route to pick the interface from');
  }
  if (!link.up) throw new Error(`underlay interface ${link.name} is down`);
  const addrs = v4Addrs(link);
  const local = publicIP && addrs.some((a) => a.local === publicIP.toString()) ? publicIP : IP.parse(addrs[0]?.local ?? '');
  if (!local) throw new Error(`underlay interface ${link.name} has no IPv4 address`);
  return { dev: link.name, localIP: local, publicIP: publicIP ?? local, mtu: link.mtu };
}
