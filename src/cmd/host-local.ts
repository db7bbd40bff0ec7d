// bin/host-local: a CNI plugin when CNI_COMMAND is set, an operator's CLI otherwise.
import { runCni } from '../cni/skel';
import { isCniInvocation } from '../cni/env';
import { hostLocal } from '../ipam/host-local';

if (isCniInvocation(process.env)) {
  void runCni(hostLocal);
} else {
  // Loaded only here, so CNI calls never pay for commander.
  void import('../cli/host-local').then((cli) => cli.main(process.argv));
}
