// bin/host-local: a CNI plugin when run by a runtime, an operator's CLI otherwise.
import { runCni } from '../cni/skel';
import { isCniInvocation } from '../cni/env';
import { hostLocal } from '../ipam/host-local';
import { runEmbeddedCli } from '../cli/embedded';

if (isCniInvocation(process.env, process.argv.slice(2))) void runCni(hostLocal);
else void runEmbeddedCli(process.argv);
