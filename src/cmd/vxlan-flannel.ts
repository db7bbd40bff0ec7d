// bin/vxlan-flannel: the CNI plugin when run by a runtime; otherwise the node
// daemon and operator commands, embedded as a string by build.mjs and compiled
// only then, so CNI calls never parse commander or the etcd/grpc client.
import { runCni } from '../cni/skel';
import { isCniInvocation } from '../cni/env';
import { holdsPlugin } from '../cni/in-process';
import { setRunner } from '../iproute/exec';
import { syncRunner } from '../iproute/sync-runner';
import { setPluginExec } from '../cni/delegate';
import { execPluginSync } from '../util/plugin-exec-sync';
import { flannelPlugin } from '../flannel/plugin/cni';
import { runEmbeddedCli } from '../cli/embedded';

if (isCniInvocation(process.env, process.argv.slice(2))) {
  // One command at a time, as the bridge runs them (CHECK and STATUS list links; the bridge does the rest).
  setRunner(syncRunner);
  setPluginExec(execPluginSync); // delegates that are not ours, exec'd without node:child_process
  // The pod chain (flannel -> bridge -> host-local) in this one process when the delegates are this build.
  holdsPlugin('bridge', async () => (await import('../bridge/plugin')).bridgePlugin);
  holdsPlugin('host-local', async () => (await import('../ipam/host-local')).hostLocal);
  void runCni(flannelPlugin);
} else void runEmbeddedCli(process.argv);
