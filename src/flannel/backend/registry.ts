// The backends by Backend.Type, as flannel registers them: the one place that
// knows which types exist.
import type { NetworkConfig } from '../netconfig';
import type { Backend, BackendContext, ExternalInterface } from './backend';
import { HostGwNetwork } from './host-gw/network';
import { VxlanNetwork } from './vxlan/network';

/** The backend the network config asks for, on this interface. Throws when it cannot run here (NAT for host-gw, an MTU too small for vxlan). */
export function newBackend(cfg: NetworkConfig, ext: ExternalInterface, ctx: BackendContext): Backend {
  switch (cfg.backend) {
    case 'host-gw':
      return new HostGwNetwork(cfg, ext, ctx);
    case 'vxlan':
      return new VxlanNetwork(cfg, ext, ctx);
  }
}
