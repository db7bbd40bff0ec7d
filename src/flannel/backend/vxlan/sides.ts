// The overlay's families ("sides"): IPv4 on flannel.<VNI> over the IPv4
// underlay, IPv6 on flannel-v6.<VNI> over the IPv6 underlay, as flanneld
// does; a dual-stack overlay has both, an IPv6-only one only the second.
// What each VTEP looks like follows from the network config, the underlay and
// (once held) the lease. No I/O here: the facts are handed in.
import type { IP } from '../../../net/ip';
import { randomMac } from '../../../net/mac';
import type { VxlanSpec } from '../../../iproute/vxlan';
import type { LeaseAttrs, LeaseSubnets } from '../../lease';
import { ENCAP_OVERHEAD, MIN_MTU, type NetworkConfig, type Pool } from '../../netconfig';
import type { Self } from './peers';
import { familiesOf, leasedSubnet, type ExternalInterface, type LeasedFamily } from '../backend';
import { vtep6Name, vtepName } from './vtep';

/** One family of the overlay before the lease: its pool, the address peers reach it at, its VTEP but the MAC. */
export interface SidePlan {
  family: 4 | 6;
  pool: Pool;
  publicIP: IP;
  vtep: Omit<VxlanSpec, 'mac'>;
}

/** One family with this node's lease: its subnet, and its VTEP with the MAC the lease advertises. */
export interface Side extends LeasedFamily {
  spec: VxlanSpec;
}

/**
 * The underlay MTU the VTEPs are sized for: Backend.MTU as flannel reads it
 * (the underlay's MTU, set by hand), but never above the interface's own:
 * the kernel clamps a VXLAN device to its underlay's MTU less the
 * encapsulation, as it does flanneld's.
 */
const underlayMtu = (cfg: NetworkConfig, ul: ExternalInterface) => Math.min(cfg.mtu ?? ul.mtu, ul.mtu);

/**
 * The families the network config enables, on this underlay. Fails when the
 * underlay lacks a family the config needs, or a VTEP's MTU (the underlay MTU
 * less the encapsulation: 50 bytes over IPv4, 70 over IPv6) is below its
 * family's minimum.
 */
export function planSides(cfg: NetworkConfig, ul: ExternalInterface): SidePlan[] {
  const plans: SidePlan[] = [];
  for (const { family, pool, localIP: local, publicIP } of familiesOf(cfg, ul)) {
    const mtu = underlayMtu(cfg, ul) - ENCAP_OVERHEAD[family];
    if (mtu < MIN_MTU[family]) {
      // (a Backend.MTU that small is refused with the network config)
      throw new Error(`IPv${family} VTEP MTU ${mtu} is too small (underlay ${ul.dev} MTU ${ul.mtu}; IPv${family} needs ${MIN_MTU[family]})`);
    }
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
    const subnet = leasedSubnet(lease, family);
    const mac = macOf(attrs, family);
    if (!mac) throw new Error(`the lease has no IPv${family} VTEP MAC`);
    return { family, pool, publicIP, subnet, spec: { ...vtep, mac } };
  });
}

/** This node as the peer planning sees it on one side. */
export function selfOf(side: Side): Self {
  return { subnet: side.subnet, publicIP: side.publicIP, vni: side.spec.vni, mac: side.spec.mac };
}

/** The pods' MTU: the smaller VTEP's, so packets of either family fit without PMTU discovery. */
export const podMtu = (plans: readonly SidePlan[]) => Math.min(...plans.map((p) => p.vtep.mtu));
