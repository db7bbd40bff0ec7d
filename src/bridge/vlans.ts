// ADD, VLANs ("vlan", "vlanTrunk"): the port's VLANs on the filtering bridge,
// in one `bridge -batch`. The VLAN gateway's port gets them too, on every ADD
// and not only when this call created it: an earlier ADD may have created it
// and failed before its VLANs were set. Adding a VLAN a port already has
// changes nothing.
import { CniError, ErrorCode } from '../cni/errors';
import { Batch, type Handle } from '../iproute/batch';
import { vlanAdd, vlanDel, vlanRanges } from '../iproute/vlan';
import type { BridgeConfig } from './config';
import type { HostState } from './host';
import { vlanGatewayPeerName } from './names';

export async function setupVlans(cfg: BridgeConfig, host: HostState, port: string): Promise<void> {
  const pvid = Number(host.bridge.linkinfo?.info_data?.vlan_default_pvid ?? 1) || 1;
  const b = new Batch('bridge');
  // The default VLAN may already be gone from the port: its removal may fail.
  const mayFail: Handle[] = [];
  for (const dev of [port, ...(host.vlanGateway ? [vlanGatewayPeerName(cfg.bridge, cfg.vlan)] : [])]) {
    if (!cfg.preserveDefaultVlan) mayFail.push(b.add(vlanDel(dev, pvid)));
    if (cfg.vlan > 0) b.add(vlanAdd(dev, cfg.vlan, { pvid: true, untagged: true }));
    for (const r of vlanRanges(cfg.vlanTrunk)) b.add(vlanAdd(dev, r));
  }
  await b.run();
  const bad = b.failed().find((h) => !mayFail.includes(h as Handle));
  if (bad) {
    const hint = /not supported/i.test(bad.error!) ? ' (the kernel lacks CONFIG_BRIDGE_VLAN_FILTERING)' : '';
    throw new CniError(ErrorCode.Internal, `failed to set up VLANs on ${bad.line[3]}: bridge ${bad.line.join(' ')}: ${bad.error}${hint}`);
  }
}
