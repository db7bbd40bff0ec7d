// Addressing: from the IPAM result and the config to what the container gets
// (addresses with gateways, routes), what the bridge gets (gateway addresses)
// and what is masqueraded. Pure, so it is unit-tested directly.
import { CniError, ErrorCode } from '../cni/errors';
import type { IPConfig, Result, Route } from '../cni/result';
import { IP, Prefix, type Family } from '../net/ip';
import type { MasqTarget } from '../iproute/masq';
import type { BridgeConfig } from './config';

export interface GatewayAddr {
  family: Family;
  /** "10.1.0.1/24": the gateway with the prefix length of the subnet it serves. */
  cidr: string;
  prefix: Prefix;
}

export interface AddressPlan {
  /** Every address goes on the container interface (result interface index 2). */
  ips: IPConfig[];
  routes: Route[];
  /** Addresses for the bridge (isGateway), one per distinct gateway. */
  gateways: GatewayAddr[];
  /** Default gateway per family, for routes that name none. */
  familyGateway: { 4?: string; 6?: string };
  masq: MasqTarget[];
  families: Set<Family>;
}

const CONTAINER_IFACE_INDEX = 2;

const familyOfText = (s: string): Family => (s.includes(':') ? 6 : 4);

export function planAddresses(cfg: BridgeConfig, ipam: Result): AddressPlan {
  for (const r of ipam.routes ?? []) {
    // Checked here: `ip` would abort its whole batch on a word it cannot parse.
    if (typeof r.dst !== 'string' || !Prefix.parse(r.dst)) throw new CniError(ErrorCode.DecodingFailure, `IPAM returned a route with an invalid dst ${JSON.stringify(r.dst)}`);
    if (r.gw !== undefined && (typeof r.gw !== 'string' || !IP.parse(r.gw))) {
      throw new CniError(ErrorCode.DecodingFailure, `IPAM returned a route with an invalid gw ${JSON.stringify(r.gw)}`);
    }
  }
  const plan: AddressPlan = { ips: [], routes: [...(ipam.routes ?? [])], gateways: [], familyGateway: {}, masq: [], families: new Set() };
  const defaultFound: Record<Family, boolean> = { 4: false, 6: false };
  for (const ipc of ipam.ips ?? []) {
    const prefix = Prefix.parse(ipc.address);
    if (!prefix) throw new CniError(ErrorCode.DecodingFailure, `IPAM returned an invalid address ${JSON.stringify(ipc.address)}`);
    const family = prefix.family;
    plan.families.add(family);
    if (ipc.gateway !== undefined && (typeof ipc.gateway !== 'string' || IP.parse(ipc.gateway)?.family !== family)) {
      throw new CniError(ErrorCode.DecodingFailure, `IPAM returned an invalid gateway ${JSON.stringify(ipc.gateway)} for ${ipc.address}`);
    }
    let gateway = ipc.gateway;
    if (!gateway && cfg.isGateway) gateway = prefix.network.next().toString();
    plan.ips.push({ address: ipc.address, ...(gateway ? { gateway } : {}), interface: CONTAINER_IFACE_INDEX });
    if (gateway && plan.familyGateway[family] === undefined) plan.familyGateway[family] = gateway;

    if (cfg.isDefaultGateway && !defaultFound[family]) {
      const dflt = family === 4 ? '0.0.0.0/0' : '::/0';
      defaultFound[family] = plan.routes.some((r) => !!r.gw && Prefix.parse(r.dst)?.toString() === dflt);
      if (!defaultFound[family]) {
        plan.routes.push({ dst: dflt, ...(gateway ? { gw: gateway } : {}) });
        defaultFound[family] = true;
      }
    }
    if (cfg.isGateway && gateway) {
      const cidr = `${gateway}/${prefix.length}`;
      if (!plan.gateways.some((g) => g.cidr === cidr)) {
        plan.gateways.push({ family, cidr, prefix: Prefix.parse(cidr)! });
      }
    }
    plan.masq.push({ ip: prefix.address.toString(), family, subnet: prefix.toString() });
  }
  return plan;
}

/** The gateway a route uses in the container: its own, or its family's. */
export function routeGateway(route: Route, plan: AddressPlan): string | undefined {
  return route.gw ?? plan.familyGateway[familyOfText(route.dst)];
}

export { familyOfText };
