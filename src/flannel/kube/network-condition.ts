// The Node condition flanneld sets once its network is up (CompleteLease,
// unless --set-node-network-unavailable=false): NetworkUnavailable False.
// kubelet and cloud controllers may set it True until a network plugin
// clears it; the scheduler keeps pods off a node while it is True. We also
// set it True when the overlay is not in place (a VTEP down, peers the
// kernel refused): flanneld never does, and keeps pods coming to a node
// whose pods reach no other node.

import { utcIso } from '../../util/utc-time';

/** metav1.Time: RFC 3339 in seconds. */
const kubeTime = (now: Date) => utcIso(now.getTime()).replace(/\.\d+Z$/, 'Z');

/** The status patch that marks the Node's network as down at `now`, saying why (a short reason). */
export function networkDownPatch(now: Date, reason: string): { status: { conditions: object[] } } {
  const time = kubeTime(now);
  return {
    status: {
      conditions: [
        { type: 'NetworkUnavailable', status: 'True', lastHeartbeatTime: time, lastTransitionTime: time, reason: 'FlannelIsNotReady', message: `Flannel's overlay is not in place on this node: ${reason}` },
      ],
    },
  };
}

/**
 * The status patch (strategic merge: conditions merge by type, the others
 * stay) that marks the Node's network as up at `now`; send it to the Node's
 * status subresource.
 */
export function networkUpPatch(now: Date): { status: { conditions: object[] } } {
  const time = kubeTime(now);
  return {
    status: {
      conditions: [
        // core/v1 NodeCondition's field order, as flanneld's patch has it
        { type: 'NetworkUnavailable', status: 'False', lastHeartbeatTime: time, lastTransitionTime: time, reason: 'FlannelIsUp', message: 'Flannel is running on this node' },
      ],
    },
  };
}
