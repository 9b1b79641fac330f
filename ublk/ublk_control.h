/* The ublk control device, /dev/ublk-control: add one ublk block device, give it its
 * size and limits, start it once every queue has asked for requests, stop and delete
 * it. Each command is an io_uring URING_CMD whose payload sits in the second half of a
 * 128-byte SQE, which the kernel requires of this device (IORING_SETUP_SQE128).
 *
 * Errors: the kernel's answer as a negative errno (CONTRIBUTING.md, convention 2)
 * and, where a call takes err, also a sentence there that says what to do (convention
 * 1's sentence).
 */
#ifndef RAMPART_UBLK_CONTROL_H
#define RAMPART_UBLK_CONTROL_H

#include <liburing.h>
#include <stdbool.h>
#include <linux/ublk_cmd.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ublk_control {
  int fd;
  struct io_uring ring;
  struct ublksrv_ctrl_dev_info info; /* as the kernel returned it from ADD_DEV */
};

/* Opens /dev/ublk-control (loading nothing: the ublk_drv module must be loaded). */
int ublk_control_open(struct ublk_control *c, char *err, size_t errlen);
void ublk_control_close(struct ublk_control *c);

/* Adds device dev_id (-1: the kernel picks one) with `queues` queues of `depth` tags,
 * each request at most max_io_bytes. recoverable: the device outlives its daemon
 * (UBLK_F_USER_RECOVERY with REISSUE): when the daemon dies the kernel holds its I/O,
 * and requests the daemon had are sent again to the next one that recovers it. On
 * success c->info.dev_id names /dev/ublkbN. */
int ublk_control_add(struct ublk_control *c, int dev_id, uint16_t queues, uint16_t depth,
                     uint32_t max_io_bytes, bool recoverable, char *err, size_t errlen);
/* Device dev_id as the kernel has it (c->info): 0, -ENODEV when there is none. */
int ublk_control_get_info(struct ublk_control *c, int dev_id);
/* Takes over a device whose daemon died (recoverable, QUIESCED): waits up to
 * wait_ms for the dead daemon to be gone entirely (the driver answers EBUSY until then).
 * Then the queues fetch every tag again, and ublk_control_end_recovery hands the device
 * to this daemon. */
int ublk_control_start_recovery(struct ublk_control *c, unsigned wait_ms, char *err,
                                size_t errlen);
int ublk_control_end_recovery(struct ublk_control *c, pid_t daemon, char *err, size_t errlen);
/* Size in bytes, 4 KiB logical blocks (the engine's page), discard as trim. */
int ublk_control_set_params(struct ublk_control *c, uint64_t size, char *err, size_t errlen);
/* Blocks until every queue has fetched every tag, then /dev/ublkbN appears. */
int ublk_control_start(struct ublk_control *c, pid_t daemon, char *err, size_t errlen);
int ublk_control_stop(struct ublk_control *c);
int ublk_control_delete(struct ublk_control *c);

#endif
