/* ublk control commands (ublk_control.h). One command at a time, synchronously: they
 * run at start and stop only, never on the I/O path. */
#include "ublk_control.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CONTROL_PATH "/dev/ublk-control"

int ublk_control_open(struct ublk_control *c, char *err, size_t errlen)
{
  memset(c, 0, sizeof *c);
  c->fd = open(CONTROL_PATH, O_RDWR | O_CLOEXEC);
  if (c->fd < 0) {
    int e = errno;
    snprintf(err, errlen,
             "cannot open %s: %s: this kernel needs the ublk driver "
             "(CONFIG_BLK_DEV_UBLK, Linux 6.0 or later): 'modprobe ublk_drv', as root",
             CONTROL_PATH, strerror(e));
    return -e;
  }
  int r = io_uring_queue_init(4, &c->ring, IORING_SETUP_SQE128);
  if (r < 0) {
    snprintf(err, errlen, "cannot set up an io_uring for %s: %s", CONTROL_PATH, strerror(-r));
    close(c->fd);
    c->fd = -1;
    return r;
  }
  c->info.dev_id = (uint32_t)-1;
  return 0;
}

void ublk_control_close(struct ublk_control *c)
{
  if (c->fd < 0)
    return;
  io_uring_queue_exit(&c->ring);
  close(c->fd);
  c->fd = -1;
}

/* Sends one command and waits for its answer: the CQE's result, 0 or -errno. */
static int control_command(struct ublk_control *c, uint32_t op, uint64_t addr, uint16_t len,
                           uint64_t data0)
{
  struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);
  if (!sqe)
    return -EBUSY;
  memset(sqe, 0, 2 * sizeof *sqe); /* the whole 128-byte entry */
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = c->fd;
  sqe->cmd_op = op;
  struct ublksrv_ctrl_cmd *cmd = (struct ublksrv_ctrl_cmd *)sqe->cmd;
  cmd->dev_id = c->info.dev_id;
  cmd->queue_id = (uint16_t)-1;
  cmd->addr = addr;
  cmd->len = len;
  cmd->data[0] = data0;
  int r = io_uring_submit(&c->ring);
  if (r < 0)
    return r;
  struct io_uring_cqe *cqe;
  do
    r = io_uring_wait_cqe(&c->ring, &cqe);
  while (r == -EINTR);
  if (r < 0)
    return r;
  r = cqe->res;
  io_uring_cqe_seen(&c->ring, cqe);
  return r;
}

int ublk_control_add(struct ublk_control *c, int dev_id, uint16_t queues, uint16_t depth,
                     uint32_t max_io_bytes, bool recoverable, char *err, size_t errlen)
{
  memset(&c->info, 0, sizeof c->info);
  c->info.dev_id = (uint32_t)dev_id;
  c->info.nr_hw_queues = queues;
  c->info.queue_depth = depth;
  c->info.max_io_buf_bytes = max_io_bytes;
  c->info.ublksrv_pid = getpid();
  if (recoverable)
    c->info.flags = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
  int r = control_command(c, UBLK_CMD_ADD_DEV, (uint64_t)(uintptr_t)&c->info, sizeof c->info,
                          0);
  if (r < 0) {
    if (r == -EEXIST)
      snprintf(err, errlen,
               "ublk device %d exists already: stop the daemon that serves "
               "it, or pick another id (--id)",
               dev_id);
    else
      snprintf(err, errlen,
               "the ublk driver refused to add a device (%u queues of %u, "
               "%u-byte requests): %s",
               queues, depth, max_io_bytes, strerror(-r));
  }
  return r;
}

int ublk_control_set_params(struct ublk_control *c, uint64_t size, char *err, size_t errlen)
{
  struct ublk_params p;
  memset(&p, 0, sizeof p);
  p.len = sizeof p;
  p.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
  /* The engine's page is the unit of everything it stores: a 4 KiB logical block keeps
   * the kernel from ever sending a partial page (no read-modify-write on this path). */
  p.basic.logical_bs_shift = 12;
  p.basic.physical_bs_shift = 12;
  p.basic.io_min_shift = 12;
  p.basic.io_opt_shift = 12;
  p.basic.max_sectors = c->info.max_io_buf_bytes >> 9;
  p.basic.dev_sectors = size >> 9;
  /* The engine acknowledges a write once it is stored as redundancy= says (docs/flush.md):
   * a volatile cache, so the kernel sends flushes, which the engine honours. */
  p.basic.attrs = UBLK_ATTR_VOLATILE_CACHE;
  p.discard.discard_granularity = 4096;
  p.discard.max_discard_sectors = UINT32_MAX >> 9;
  p.discard.max_write_zeroes_sectors = UINT32_MAX >> 9;
  p.discard.max_discard_segments = 1;
  int r = control_command(c, UBLK_CMD_SET_PARAMS, (uint64_t)(uintptr_t)&p, sizeof p, 0);
  if (r < 0)
    snprintf(err, errlen, "the ublk driver refused the device's parameters (%llu bytes): %s",
             (unsigned long long)size, strerror(-r));
  return r;
}

int ublk_control_start(struct ublk_control *c, pid_t daemon, char *err, size_t errlen)
{
  int r = control_command(c, UBLK_CMD_START_DEV, 0, 0, (uint64_t)daemon);
  if (r < 0)
    snprintf(err, errlen, "the ublk driver did not start /dev/ublkb%u: %s", c->info.dev_id,
             strerror(-r));
  return r;
}

int ublk_control_get_info(struct ublk_control *c, int dev_id)
{
  c->info.dev_id = (uint32_t)dev_id;
  struct ublksrv_ctrl_dev_info info;
  memset(&info, 0, sizeof info);
  int r = control_command(c, UBLK_CMD_GET_DEV_INFO, (uint64_t)(uintptr_t)&info, sizeof info,
                          0);
  if (r == 0)
    c->info = info;
  return r;
}

int ublk_control_start_recovery(struct ublk_control *c, unsigned wait_ms, char *err,
                                size_t errlen)
{
  int r;
  for (unsigned waited = 0;; waited += 50) {
    r = control_command(c, UBLK_CMD_START_USER_RECOVERY, 0, 0, 0);
    if (r != -EBUSY || waited >= wait_ms)
      break;
    usleep(50000); /* the dead daemon's io_uring and char device are still being torn down */
  }
  if (r < 0)
    snprintf(err, errlen, "the ublk driver would not let /dev/ublkb%u be recovered: %s%s",
             c->info.dev_id, strerror(-r),
             r == -EBUSY ? " (its old daemon is still running, or its requests are still "
                           "being quiesced: stop the old daemon first)"
                         : " (it was added without recovery, or it is not waiting for a "
                           "daemon: delete it and start afresh)");
  return r;
}

int ublk_control_end_recovery(struct ublk_control *c, pid_t daemon, char *err, size_t errlen)
{
  int r = control_command(c, UBLK_CMD_END_USER_RECOVERY, 0, 0, (uint64_t)daemon);
  if (r < 0)
    snprintf(err, errlen, "the ublk driver did not hand /dev/ublkb%u back: %s",
             c->info.dev_id, strerror(-r));
  return r;
}

int ublk_control_stop(struct ublk_control *c)
{
  return control_command(c, UBLK_CMD_STOP_DEV, 0, 0, 0);
}

int ublk_control_delete(struct ublk_control *c)
{
  return control_command(c, UBLK_CMD_DEL_DEV, 0, 0, 0);
}
