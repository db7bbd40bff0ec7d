// bin/vxlan-flannel: the CNI plugin when CNI_COMMAND is set; otherwise the
// node daemon and operator commands (loaded lazily, so CNI calls never parse
// commander or the etcd client).
import { runCni } from '../cni/skel';
import { flannelPlugin } from '../flannel/cni';

if (process.env.CNI_COMMAND) {
  void runCni(flannelPlugin);
} else {
  void import('../cli/vxlan-flannel').then((cli) => cli.main(process.argv));
}
