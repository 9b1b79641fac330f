/* Generic netlink for the NBD driver (nbd_netlink.h). */
#include "nbd_netlink.h"

#include <errno.h>
#include <linux/genetlink.h>
#include <linux/nbd-netlink.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MESSAGE_BYTES 8192

struct message {
  union {
    struct nlmsghdr header;
    uint8_t bytes[1024];
  };
  size_t len;
};

static void message_start(struct message *m, struct nbd_netlink *nl, uint16_t type,
                          uint8_t cmd, uint8_t version)
{
  memset(m, 0, sizeof *m);
  m->header.nlmsg_type = type;
  m->header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  m->header.nlmsg_seq = ++nl->seq;
  struct genlmsghdr *g = (struct genlmsghdr *)(m->bytes + NLMSG_HDRLEN);
  g->cmd = cmd;
  g->version = version;
  m->len = NLMSG_HDRLEN + GENL_HDRLEN;
}

static struct nlattr *put(struct message *m, uint16_t type, const void *data, size_t len)
{
  struct nlattr *a = (struct nlattr *)(m->bytes + m->len);
  a->nla_type = type;
  a->nla_len = (uint16_t)(NLA_HDRLEN + len);
  if (len)
    memcpy((uint8_t *)a + NLA_HDRLEN, data, len);
  m->len += NLA_ALIGN(NLA_HDRLEN + len);
  return a;
}

static void put_u32(struct message *m, uint16_t type, uint32_t v)
{
  put(m, type, &v, 4);
}
static void put_u64(struct message *m, uint16_t type, uint64_t v)
{
  put(m, type, &v, 8);
}

static void nest_end(struct message *m, struct nlattr *nest)
{
  nest->nla_len = (uint16_t)(m->bytes + m->len - (uint8_t *)nest);
}

/* The sockets as one NBD_ATTR_SOCKETS list, an item each. */
static void put_sockets(struct message *m, const int *socks, unsigned nsocks)
{
  struct nlattr *list = put(m, NBD_ATTR_SOCKETS, NULL, 0);
  for (unsigned i = 0; i < nsocks; i++) {
    struct nlattr *item = put(m, NBD_SOCK_ITEM, NULL, 0);
    put_u32(m, NBD_SOCK_FD, (uint32_t)socks[i]);
    nest_end(m, item);
  }
  nest_end(m, list);
}

/* Calls fn for each attribute in [data, data + len). */
static void each_attr(const uint8_t *data, size_t len,
                      void (*fn)(const struct nlattr *a, void *ctx), void *ctx)
{
  while (len >= NLA_HDRLEN) {
    const struct nlattr *a = (const struct nlattr *)data;
    if (a->nla_len < NLA_HDRLEN || a->nla_len > len)
      return;
    fn(a, ctx);
    size_t step = NLA_ALIGN(a->nla_len);
    if (step >= len)
      return;
    data += step;
    len -= step;
  }
}

static const void *attr_data(const struct nlattr *a)
{
  return (const uint8_t *)a + NLA_HDRLEN;
}
static size_t attr_len(const struct nlattr *a)
{
  return a->nla_len - NLA_HDRLEN;
}

/* Sends m and reads until the driver's acknowledgement. Each reply message before it
 * goes to on_reply. 0 or the negative errno answered. */
static int transact(struct nbd_netlink *nl, struct message *m,
                    void (*on_reply)(const struct nlattr *a, void *ctx), void *ctx)
{
  m->header.nlmsg_len = (uint32_t)m->len;
  struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
  ssize_t s;
  do
    s = sendto(nl->fd, m->bytes, m->len, 0, (struct sockaddr *)&kernel, sizeof kernel);
  while (s < 0 && errno == EINTR);
  if (s < 0)
    return -errno;
  uint32_t seq = m->header.nlmsg_seq;
  for (;;) {
    union {
      struct nlmsghdr header;
      uint8_t bytes[MESSAGE_BYTES];
    } buf;
    ssize_t n = recv(nl->fd, buf.bytes, sizeof buf.bytes, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    size_t left = (size_t)n;
    for (struct nlmsghdr *h = &buf.header; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq)
        continue; /* a stale answer to a request given up on */
      if (h->nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *e = NLMSG_DATA(h);
        return e->error; /* 0 is the acknowledgement */
      }
      if (h->nlmsg_type == NLMSG_DONE)
        return 0;
      if (on_reply && h->nlmsg_len >= NLMSG_HDRLEN + GENL_HDRLEN)
        each_attr((const uint8_t *)NLMSG_DATA(h) + GENL_HDRLEN,
                  h->nlmsg_len - NLMSG_HDRLEN - GENL_HDRLEN, on_reply, ctx);
    }
  }
}

struct family_reply {
  uint16_t id;
  uint32_t group;
  bool group_found;
};

struct mcast_group {
  const char *name;
  uint32_t id;
};

static void on_group_attr(const struct nlattr *a, void *ctx)
{
  struct mcast_group *g = ctx;
  if (a->nla_type == CTRL_ATTR_MCAST_GRP_NAME)
    g->name = attr_data(a);
  else if (a->nla_type == CTRL_ATTR_MCAST_GRP_ID && attr_len(a) == 4)
    memcpy(&g->id, attr_data(a), 4);
}

static void on_group(const struct nlattr *a, void *ctx)
{
  struct family_reply *f = ctx;
  struct mcast_group g = { NULL, 0 };
  each_attr(attr_data(a), attr_len(a), on_group_attr, &g);
  if (g.name && strcmp(g.name, NBD_GENL_MCAST_GROUP_NAME) == 0) {
    f->group = g.id;
    f->group_found = true;
  }
}

static void on_family_attr(const struct nlattr *a, void *ctx)
{
  struct family_reply *f = ctx;
  if (a->nla_type == CTRL_ATTR_FAMILY_ID && attr_len(a) == 2)
    memcpy(&f->id, attr_data(a), 2);
  else if (a->nla_type == CTRL_ATTR_MCAST_GROUPS)
    each_attr(attr_data(a), attr_len(a), on_group, f);
}

static int netlink_socket(void)
{
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
  if (fd < 0)
    return -1;
  struct sockaddr_nl self = { .nl_family = AF_NETLINK };
  if (bind(fd, (struct sockaddr *)&self, sizeof self) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int nbd_netlink_open(struct nbd_netlink *nl, char *err, size_t errlen)
{
  memset(nl, 0, sizeof *nl);
  nl->fd = netlink_socket();
  nl->events_fd = -1;
  if (nl->fd < 0) {
    snprintf(err, errlen, "cannot open a generic netlink socket: %s", strerror(errno));
    return -1;
  }
  struct message m;
  message_start(&m, nl, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1);
  put(&m, CTRL_ATTR_FAMILY_NAME, NBD_GENL_FAMILY_NAME, sizeof NBD_GENL_FAMILY_NAME);
  struct family_reply f = { 0 };
  int r = transact(nl, &m, on_family_attr, &f);
  if (r < 0 || f.id == 0) {
    snprintf(err, errlen, "the kernel's NBD driver is not loaded (%s): run 'modprobe nbd'",
             r < 0 ? strerror(-r) : "no family id");
    nbd_netlink_close(nl);
    return -1;
  }
  nl->family = f.id;
  if (!f.group_found) {
    snprintf(err, errlen,
             "the kernel's NBD driver has no '%s' multicast group (Linux "
             "4.12 or later has it)",
             NBD_GENL_MCAST_GROUP_NAME);
    nbd_netlink_close(nl);
    return -1;
  }
  nl->events_fd = netlink_socket();
  if (nl->events_fd < 0 || setsockopt(nl->events_fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP,
                                      &f.group, sizeof f.group) < 0) {
    snprintf(err, errlen, "cannot join the NBD driver's multicast group: %s",
             strerror(errno));
    nbd_netlink_close(nl);
    return -1;
  }
  return 0;
}

void nbd_netlink_close(struct nbd_netlink *nl)
{
  if (nl->fd >= 0)
    close(nl->fd);
  if (nl->events_fd >= 0)
    close(nl->events_fd);
  nl->fd = nl->events_fd = -1;
}

static void on_index(const struct nlattr *a, void *ctx)
{
  if (a->nla_type == NBD_ATTR_INDEX && attr_len(a) == 4)
    memcpy(ctx, attr_data(a), 4);
}

int nbd_netlink_connect(struct nbd_netlink *nl, struct nbd_device_settings *s,
                        const int *socks, unsigned nsocks, char *err, size_t errlen)
{
  struct message m;
  message_start(&m, nl, nl->family, NBD_CMD_CONNECT, NBD_GENL_VERSION);
  if (s->index >= 0)
    put_u32(&m, NBD_ATTR_INDEX, (uint32_t)s->index);
  put_u64(&m, NBD_ATTR_SIZE_BYTES, s->size);
  put_u64(&m, NBD_ATTR_BLOCK_SIZE_BYTES, s->block_size);
  put_u64(&m, NBD_ATTR_SERVER_FLAGS, s->server_flags);
  put_u64(&m, NBD_ATTR_TIMEOUT, s->timeout_s);
  put_u64(&m, NBD_ATTR_DEAD_CONN_TIMEOUT, s->dead_conn_timeout_s);
  if (s->backend)
    put(&m, NBD_ATTR_BACKEND_IDENTIFIER, s->backend, strlen(s->backend) + 1);
  put_sockets(&m, socks, nsocks);
  uint32_t index = UINT32_MAX;
  int r = transact(nl, &m, on_index, &index);
  if (r < 0) {
    if (r == -EBUSY)
      snprintf(err, errlen,
               "/dev/nbd%d is in use: detach it first ('nbd-client -d "
               "/dev/nbd%d'), or name another with --device",
               s->index, s->index);
    else
      snprintf(err, errlen,
               "the NBD driver refused to attach the device: %s (dmesg "
               "says why)",
               strerror(-r));
    return -1;
  }
  if (index == UINT32_MAX) {
    snprintf(err, errlen, "the NBD driver attached a device without saying which");
    return -1;
  }
  s->index = (int)index;
  return 0;
}

int nbd_netlink_reconfigure(struct nbd_netlink *nl, const struct nbd_device_settings *s,
                            const int *socks, unsigned nsocks)
{
  struct message m;
  message_start(&m, nl, nl->family, NBD_CMD_RECONFIGURE, NBD_GENL_VERSION);
  put_u32(&m, NBD_ATTR_INDEX, (uint32_t)s->index);
  if (s->backend)
    put(&m, NBD_ATTR_BACKEND_IDENTIFIER, s->backend, strlen(s->backend) + 1);
  put_sockets(&m, socks, nsocks);
  return transact(nl, &m, NULL, NULL);
}

int nbd_netlink_disconnect(struct nbd_netlink *nl, int index)
{
  struct message m;
  message_start(&m, nl, nl->family, NBD_CMD_DISCONNECT, NBD_GENL_VERSION);
  put_u32(&m, NBD_ATTR_INDEX, (uint32_t)index);
  return transact(nl, &m, NULL, NULL);
}

int nbd_netlink_read_event(struct nbd_netlink *nl)
{
  union {
    struct nlmsghdr header;
    uint8_t bytes[MESSAGE_BYTES];
  } buf;
  ssize_t n;
  do
    n = recv(nl->events_fd, buf.bytes, sizeof buf.bytes, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == ENOBUFS)
    return NBD_NETLINK_EVENTS_LOST;
  if (n <= 0)
    return NBD_NETLINK_NO_EVENT;
  size_t left = (size_t)n;
  for (struct nlmsghdr *h = &buf.header; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type != nl->family || h->nlmsg_len < NLMSG_HDRLEN + GENL_HDRLEN)
      continue;
    const struct genlmsghdr *g = NLMSG_DATA(h);
    if (g->cmd != NBD_CMD_LINK_DEAD)
      continue;
    uint32_t index = UINT32_MAX;
    each_attr((const uint8_t *)g + GENL_HDRLEN, h->nlmsg_len - NLMSG_HDRLEN - GENL_HDRLEN,
              on_index, &index);
    if (index != UINT32_MAX)
      return (int)index;
  }
  return NBD_NETLINK_OTHER_EVENT;
}
