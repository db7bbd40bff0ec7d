// bin/vxlan-flannel: the CNI plugin when run by a runtime; otherwise the node
// daemon and operator commands, embedded as a string by build.mjs and compiled
// only then, so CNI calls never parse commander or the etcd/grpc client.
import { runCni } from '../cni/skel';
import { isCniInvocation } from '../cni/env';
import { flannelPlugin } from '../flannel/plugin/cni';
import { runEmbeddedCli } from '../cli/embedded';

if (isCniInvocation(process.env, process.argv.slice(2))) void runCni(flannelPlugin);
else void runEmbeddedCli(process.argv);
