// K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS name the pod that parked
// addresses belong to. The API server accepts only DNS-1123 names there (a
// namespace is a label, a pod name a subdomain): anything else did not come
// from Kubernetes, and a "/" or a control character in it must not reach a
// record or a log line.
const LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const isLabel = (s: string) => s.length <= 63 && LABEL.test(s);
const isSubdomain = (s: string) => s.length <= 253 && s.split('.').every(isLabel);

/** Why the pod arguments are not Kubernetes names, naming the key; undefined when absent (or empty) or valid. */
export function podArgsProblem(namespace: string | undefined, name: string | undefined): string | undefined {
  if (namespace && !isLabel(namespace)) {
    return `CNI_ARGS K8S_POD_NAMESPACE ${JSON.stringify(namespace)} is not a Kubernetes namespace name (a DNS-1123 label: at most 63 of a-z, 0-9 and "-", starting and ending with a letter or digit)`;
  }
  if (name && !isSubdomain(name)) {
    return `CNI_ARGS K8S_POD_NAME ${JSON.stringify(name)} is not a Kubernetes pod name (a DNS-1123 subdomain: at most 253 of a-z, 0-9, "-" and ".", each dot-separated part starting and ending with a letter or digit)`;
  }
  return undefined;
}
