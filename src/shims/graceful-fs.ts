// Build-time stand-in for graceful-fs inside proper-lockfile (see build.mjs).
// graceful-fs queues and retries on EMFILE for programs that open thousands of
// files at once; a plugin call takes one lock, and loading it costs ~8 ms of
// start-up on every CNI call. Only the calls proper-lockfile makes are listed:
// it spreads this object, and spreading node:fs itself would trigger the lazy
// `fs.promises` getter, which loads streams (~3 ms more).
import * as fs from 'node:fs';

module.exports = {
  mkdir: fs.mkdir,
  mkdirSync: fs.mkdirSync,
  realpath: fs.realpath,
  realpathSync: fs.realpathSync,
  stat: fs.stat,
  statSync: fs.statSync,
  rmdir: fs.rmdir,
  rmdirSync: fs.rmdirSync,
  utimes: fs.utimes,
  utimesSync: fs.utimesSync,
};
