// js-yaml, for kubeconfig files: build.mjs makes this file a chunk of its own
// beside the operator CLI, compiled only when a kubeconfig is read.
export { load } from 'js-yaml';
