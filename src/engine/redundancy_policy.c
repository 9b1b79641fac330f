/* The table of redundancy_policy.h: each policy's behaviour, in one place. */
#include "redundancy_policy.h"

#include <stddef.h>
#include <string.h>

static const struct redundancy_policy policies[] = {
  {
    .id = RAMPART_REDUNDANCY_NONE,
    .name = "none",
    .parity = false,
    .write_waits_for_parity = false,
    .disk_copy = false,
    .second_copy = SECOND_COPY_NONE,
    .unanswered_write_waits = true,
    .flush_syncs_disk = false,
    .spilled_pages_move_back = true,
    .while_server_away = "reads of its pages wait for it",
    .no_second_copy = "redundancy=none keeps no second copy",
  },
  {
    .id = RAMPART_REDUNDANCY_MIRROR,
    .name = "mirror",
    .parity = true,
    .write_waits_for_parity = true,
    .disk_copy = false,
    .second_copy = SECOND_COPY_PARITY,
    .unanswered_write_waits = true,
    .flush_syncs_disk = false,
    .spilled_pages_move_back = true,
    .while_server_away = "its pages are read from their copies, or wait for it when they "
                         "cannot be",
    .no_second_copy = "its copy was lost too",
  },
  {
    .id = RAMPART_REDUNDANCY_PARITY_LOG,
    .name = "parity-log",
    .parity = true,
    .write_waits_for_parity = false,
    .disk_copy = false,
    .second_copy = SECOND_COPY_PARITY,
    .unanswered_write_waits = true,
    .flush_syncs_disk = false,
    .spilled_pages_move_back = true,
    .while_server_away = "its pages are rebuilt from their groups when read, or wait for "
                         "it when they cannot be",
    .no_second_copy = "its group's parity was lost too",
  },
  {
    .id = RAMPART_REDUNDANCY_WRITE_THROUGH,
    .name = "write-through",
    .parity = false,
    .write_waits_for_parity = false,
    .disk_copy = true,
    .second_copy = SECOND_COPY_DISK,
    .unanswered_write_waits = false,
    .flush_syncs_disk = true,
    .spilled_pages_move_back = false,
    .while_server_away = "its pages are read from the disk copy",
    .no_second_copy = "its disk copy failed too",
  },
};

const struct redundancy_policy *redundancy_policy_of(enum rampart_redundancy id)
{
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
    if (policies[i].id == id)
      return &policies[i];
  return NULL;
}

const struct redundancy_policy *redundancy_policy_named(const char *name)
{
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
    if (strcmp(policies[i].name, name) == 0)
      return &policies[i];
  return NULL;
}
