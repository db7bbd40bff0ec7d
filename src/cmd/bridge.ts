// bin/bridge: a CNI plugin when run by a runtime, an operator's CLI otherwise.
import { runCni } from '../cni/skel';
import { isCniInvocation } from '../cni/env';
import { holdsPlugin } from '../cni/in-process';
import { setRunner } from '../iproute/exec';
import { syncRunner } from '../iproute/sync-runner';
import { setPluginExec } from '../cni/delegate';
import { execPluginSync } from '../util/plugin-exec-sync';
import { bridgePlugin } from '../bridge/plugin';
import { runEmbeddedCli } from '../cli/embedded';

if (isCniInvocation(process.env, process.argv.slice(2))) {
  setRunner(syncRunner);
  setPluginExec(execPluginSync); // delegates that are not ours, exec'd without node:child_process
  // host-local of this build, when it is the IPAM plugin, runs in this process
  holdsPlugin('host-local', async () => (await import('../ipam/host-local')).hostLocal);
  void runCni(bridgePlugin);
} else void runEmbeddedCli(process.argv);
