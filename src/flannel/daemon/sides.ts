// The overlay's families ("sides"): IPv4 on flannel.<VNI> over the IPv4
// underlay, IPv6 on flannel-v6.<VNI> over the IPv6 underlay, as flanneld
// does; a dual-stack overlay has both, an IPv6-only one only the second.
// What each VTEP looks like follows from the network config, the underlay and
// (once held) the lease, and subnet.env follows from the sides. No I/O here:
// the daemon reads the world and hands the facts in.
import { IP, Prefix } from '../../net/ip';
import { randomMac } from '../../net/mac';
import type { VxlanSpec } from '../../iproute/vxlan';
import type { LeaseAttrs, LeaseSubnets } from '../lease';
import { ENCAP_OVERHEAD, MIN_MTU, type NetworkConfig, type Pool } from '../netconfig';
import type { Self } from '../backend/vxlan/peers';
import type { SubnetEnv } from '../subnet-env';
import type { Underlay } from './underlay';
import { vtep6Name, vtepName } from '../backend/vxlan/vtep';

/** One family of the overlay before the lease: its pool, the address peers reach it at, its VTEP but the MAC. */
export interface SidePlan {
  family: 4 | 6;
  pool: Pool;
  publicIP: IP;
  vtep: Omit<VxlanSpec, 'mac'>;
}

/** One family with this node's lease: its subnet, and its VTEP with the MAC the lease advertises. */
export interface Side {
  family: 4 | 6;
  pool: Pool;
  publicIP: IP;
  subnet: Prefix;
  spec: VxlanSpec;
}

/**
 * The underlay MTU the VTEPs are sized for: Backend.MTU as flannel reads it
 * (the underlay's MTU, set by hand), but never above the interface's own:
 * the kernel clamps a VXLAN device to its underlay's MTU less the
 * encapsulation, as it does flanneld's.
 */
const underlayMtu = (cfg: NetworkConfig, ul: Underlay) => Math.min(cfg.mtu ?? ul.mtu, ul.mtu);

/**
 * The families the network config enables, on this underlay. Fails when the
 * underlay lacks a family the config needs, or a VTEP's MTU (the underlay MTU
 * less the encapsulation: 50 bytes over IPv4, 70 over IPv6) is below its
 * family's minimum.
 */
export function planSides(cfg: NetworkConfig, ul: Underlay): SidePlan[] {
  if (cfg.v4 && !ul.localIP) throw new Error(`the network config enables IPv4 but underlay interface ${ul.dev} has no IPv4 address`);
  if (cfg.v6 && !ul.localIPv6) {
    throw new Error(`the network config enables IPv6 but underlay interface ${ul.dev} has no global IPv6 address (add one, or give --iface/--public-ipv6)`);
  }
  const plans: SidePlan[] = [];
  for (const [family, pool] of [[4, cfg.v4], [6, cfg.v6]] as const) {
    if (!pool) continue;
    const mtu = underlayMtu(cfg, ul) - ENCAP_OVERHEAD[family];
    if (mtu < MIN_MTU[family]) {
      // (a Backend.MTU that small is refused with the network config)
      throw new Error(`IPv${family} VTEP MTU ${mtu} is too small (underlay ${ul.dev} MTU ${ul.mtu}; IPv${family} needs ${MIN_MTU[family]})`);
    }
    const local = family === 4 ? ul.localIP! : ul.localIPv6!;
    const publicIP = family === 4 ? ul.publicIP! : ul.publicIPv6!;
    const name = family === 4 ? vtepName(cfg.vni) : vtep6Name(cfg.vni);
    const vtep = { name, vni: cfg.vni, local: local.toString(), dev: ul.dev, port: cfg.port, mtu, ...(cfg.gbp ? { gbp: true } : {}), ...(cfg.learning ? { learning: true } : {}) };
    plans.push({ family, pool, publicIP, vtep });
  }
  return plans;
}

/** The addresses this node is reached at, as a lease carries them (PublicIP, PublicIPv6). */
export function publicAddresses(plans: readonly SidePlan[]): Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'> {
  const out: Pick<LeaseAttrs, 'publicIP' | 'publicIPv6'> = {};
  for (const p of plans) out[p.family === 4 ? 'publicIP' : 'publicIPv6'] = p.publicIP;
  return out;
}

const macOf = (attrs: LeaseAttrs | undefined, family: 4 | 6) => (family === 4 ? attrs?.vtepMAC : attrs?.v6VtepMAC);

/**
 * What this node advertises in its lease. Each VTEP keeps its MAC: the
 * device's own when it is reused (`deviceMacs`, one per plan), else the one
 * this node advertised `before`, so a recreated device needs no change on the
 * peers; else a new one.
 */
export function advertise(
  plans: readonly SidePlan[],
  deviceMacs: readonly (string | undefined)[],
  before: LeaseAttrs | undefined,
  newMac: () => string = randomMac,
): LeaseAttrs {
  const attrs: LeaseAttrs = { ...publicAddresses(plans), backendType: 'vxlan' };
  plans.forEach((p, i) => {
    const mac = deviceMacs[i] ?? macOf(before, p.family) ?? newMac();
    if (p.family === 4) Object.assign(attrs, { vni: p.vtep.vni, vtepMAC: mac });
    else Object.assign(attrs, { v6Vni: p.vtep.vni, v6VtepMAC: mac });
  });
  return attrs;
}

/** The sides once the lease is held: each family's subnet, and its VTEP with the MAC `attrs` advertises. */
export function leasedSides(plans: readonly SidePlan[], lease: LeaseSubnets, attrs: LeaseAttrs): Side[] {
  return plans.map(({ family, pool, publicIP, vtep }) => {
    const subnet = family === 4 ? lease.subnet : lease.ipv6Subnet;
    const mac = macOf(attrs, family);
    if (!subnet || !mac) throw new Error(`the lease has no IPv${family} ${subnet ? 'VTEP MAC' : 'subnet'}`);
    return { family, pool, publicIP, subnet, spec: { ...vtep, mac } };
  });
}

/** This node as the peer planning sees it on one side. */
export function selfOf(side: Side): Self {
  return { subnet: side.subnet, publicIP: side.publicIP, vni: side.spec.vni, mac: side.spec.mac };
}

/**
 * subnet.env for these sides: each family's network and first host address,
 * one MTU for the pods (the smaller VTEP's, so packets of either family fit
 * without PMTU discovery) and FLANNEL_IPMASQ.
 */
export function subnetEnvOf(sides: readonly Side[], ipMasq: boolean): SubnetEnv {
  const first = (p: Prefix) => Prefix.of(p.network.next(), p.length);
  const env: SubnetEnv = { networks: [], ipv6Networks: [], ipMasq };
  for (const s of sides) {
    if (s.family === 4) Object.assign(env, { networks: [s.pool.network], subnet: first(s.subnet) });
    else Object.assign(env, { ipv6Networks: [s.pool.network], ipv6Subnet: first(s.subnet) });
  }
  env.mtu = Math.min(...sides.map((s) => s.spec.mtu));
  return env;
}
