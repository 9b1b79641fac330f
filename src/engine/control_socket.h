/* The control= socket (control_socket.c): rampartctl's commands to a running device.
 *
 * Errors: opening: NULL with a sentence in err (CONTRIBUTING.md, convention 1); a
 * command's failure is a line of text sent back to rampartctl.
 */
#ifndef RAMPART_CONTROL_SOCKET_H
#define RAMPART_CONTROL_SOCKET_H

#include <stddef.h>

struct rampart_engine;
struct control_socket;

struct control_socket *control_socket_open(struct rampart_engine *e, const char *path,
                                           char *err, size_t errlen);
void control_socket_close(struct control_socket *c);

#endif
