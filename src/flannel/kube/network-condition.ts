// The Node condition flanneld sets once its network is up (CompleteLease,
// unless --set-node-network-unavailable=false): NetworkUnavailable False.
// kubelet and cloud controllers may set it True until a network plugin
// clears it; the scheduler keeps pods off a node while it is True.

/**
 * The status patch (strategic merge: conditions merge by type, the others
 * stay) that marks the Node's network as up at `now`; send it to the Node's
 * status subresource.
 */
export function networkUpPatch(now: Date): { status: { conditions: object[] } } {
  const time = now.toISOString().replace(/\.\d+Z$/, 'Z'); // metav1.Time: RFC 3339 in seconds
  return {
    status: {
      conditions: [
        // core/v1 NodeCondition's field order, as flanneld's patch has it
        { type: 'NetworkUnavailable', status: 'False', lastHeartbeatTime: time, lastTransitionTime: time, reason: 'FlannelIsUp', message: 'Flannel is running on this node' },
      ],
    },
  };
}
