/* The NBD protocol's wire format, as both of rampart's NBD programs use it: the client
 * handshake of rampart-nbd-attach (nbd_handshake.c) and the server of rampart-nbd-server
 * (nbd_server_handshake.c, nbd_server_conn.c). The numbers are the NBD protocol
 * document's (github.com/NetworkBlockDevice/nbd, doc/proto.md); only those rampart uses
 * are here. Every field on the wire is big-endian.
 *
 * Errors: none (constants only).
 */
#ifndef RAMPART_NBD_PROTOCOL_H
#define RAMPART_NBD_PROTOCOL_H

#define NBD_INIT_MAGIC 0x4e42444d41474943ull   /* "NBDMAGIC" */
#define NBD_OPTION_MAGIC 0x49484156454f5054ull /* "IHAVEOPT" */
#define NBD_REPLY_MAGIC 0x0003e889045565a9ull  /* an option's reply */
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u

/* handshake flags (server) and client flags */
#define NBD_HANDSHAKE_FIXED_NEWSTYLE 0x1u
#define NBD_HANDSHAKE_NO_ZEROES 0x2u

/* options */
#define NBD_OPT_EXPORT_NAME 1u
#define NBD_OPT_ABORT 2u
#define NBD_OPT_LIST 3u
#define NBD_OPT_INFO 6u
#define NBD_OPT_GO 7u

/* option replies */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_FLAG_ERROR 0x80000000u
#define NBD_REP_ERR_UNSUP (NBD_REP_FLAG_ERROR | 1u)
#define NBD_REP_ERR_INVALID (NBD_REP_FLAG_ERROR | 3u)

/* NBD_REP_INFO's kinds */
#define NBD_INFO_EXPORT 0u
#define NBD_INFO_BLOCK_SIZE 3u

#define NBD_MAX_EXPORT_NAME 4096u

/* transmission flags */
#define NBD_FLAG_HAS_FLAGS 0x1u
#define NBD_FLAG_SEND_FLUSH 0x4u
#define NBD_FLAG_SEND_FUA 0x8u
#define NBD_FLAG_SEND_TRIM 0x20u
#define NBD_FLAG_SEND_WRITE_ZEROES 0x40u
#define NBD_FLAG_CAN_MULTI_CONN 0x100u

/* commands, and their flags */
#define NBD_CMD_READ 0u
#define NBD_CMD_WRITE 1u
#define NBD_CMD_DISC 2u
#define NBD_CMD_FLUSH 3u
#define NBD_CMD_TRIM 4u
#define NBD_CMD_WRITE_ZEROES 6u
#define NBD_CMD_FLAG_FUA 0x1u
#define NBD_CMD_FLAG_NO_HOLE 0x2u

/* the errors a reply may carry (the protocol's own numbers, Linux's too) */
#define NBD_EPERM 1u
#define NBD_EIO 5u
#define NBD_ENOMEM 12u
#define NBD_EINVAL 22u
#define NBD_ENOSPC 28u
#define NBD_EOVERFLOW 75u
#define NBD_ENOTSUP 95u
#define NBD_ESHUTDOWN 108u

/* sizes on the wire */
#define NBD_REQUEST_SIZE 28u
#define NBD_SIMPLE_REPLY_SIZE 16u

#endif
