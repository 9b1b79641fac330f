/* The standby's wait (ublk_standby.h). */
#include "ublk_standby.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "rampart.h"

#define QUIESCE_WAIT_MS 10000u

int ublk_standby_wait(struct ublk_control *c, int dev_id, const char *const *pin,
                      unsigned npin, size_t reserve_bytes, char *err, size_t errlen)
{
  int r = ublk_control_get_info(c, dev_id);
  if (r < 0) {
    snprintf(err, errlen,
             "standby: there is no ublk device %d to stand by for (%s): "
             "start the serving daemon first",
             dev_id, strerror(-r));
    return -1;
  }
  if (!(c->info.flags & UBLK_F_USER_RECOVERY)) {
    snprintf(err, errlen,
             "standby: /dev/ublkb%d was added without recovery: its daemon "
             "must have state= for a standby to take it over",
             dev_id);
    return -1;
  }
  /* Pinned once the device exists: its daemon adds it after opening the state, whose
   * anchor it writes anew at first open (a file pinned before would be another). */
  for (unsigned i = 0; i < npin; i++)
    rampart_standby_pin_file(pin[i]);
  pid_t serving = c->info.ublksrv_pid;
  fprintf(stderr,
          "rampart-ublk: standing by for /dev/ublkb%d (serving daemon pid %d), "
          "%zu MiB held in reserve\n",
          dev_id, serving, reserve_bytes >> 20);
  char what[64];
  snprintf(what, sizeof what, "/dev/ublkb%d (pid %d)", dev_id, (int)serving);
  rampart_notify(RAMPART_NOTICE_STANDING_BY, what);
  char why[256];
  int w = rampart_standby_wait(serving, reserve_bytes, why, sizeof why);
  if (w < 0) {
    snprintf(err, errlen, "standby: %s", why);
    return -1;
  }
  if (w == 1) {
    snprintf(err, errlen, "standby: stopped while pid %d still serves /dev/ublkb%d", serving,
             dev_id);
    return 0;
  }
  uint64_t start = rp_now_ms();
  for (;;) {
    r = ublk_control_get_info(c, dev_id);
    if (r == -ENODEV || r == -ENOENT)
      return 0; /* stopped and deleted: nothing to take over */
    if (r == 0 && c->info.state == UBLK_S_DEV_QUIESCED)
      return 1;
    if (rp_now_ms() - start > QUIESCE_WAIT_MS) {
      snprintf(err, errlen,
               "standby: /dev/ublkb%d did not wait for a daemon within %u s "
               "of pid %d's end (state %d)",
               dev_id, QUIESCE_WAIT_MS / 1000, serving, r == 0 ? c->info.state : r);
      return -1;
    }
    usleep(10000);
  }
}
