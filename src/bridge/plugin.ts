// The bridge plugin's handlers for the CNI dispatcher (cni/skel).
import type { PluginHandlers } from '../cni/skel';
import { add } from './add';
import { del } from './del';
import { check } from './check';
import { gc, status } from './gc';

export const bridgePlugin: PluginHandlers = {
  name: 'bridge',
  // MAC is ours; IP is passed on to the IPAM plugin (host-local's static request).
  knownArgs: ['MAC', 'IP'],
  add,
  del,
  check,
  gc,
  status,
};
