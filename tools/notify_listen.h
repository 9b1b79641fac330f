/* rampartctl notify-listen SOCKET: the receiving end of the daemons' sd_notify messages
 * (rampart_notify, src/engine/supervisor_notify.c): rampartctl's command, and what
 * rampart-swap (supervisor/) runs in a fork for each device.
 *
 * Errors: rampartctl's exit status (0, 1 or 2), its sentence already written to stderr.
 */
#ifndef RAMPART_TOOLS_NOTIFY_LISTEN_H
#define RAMPART_TOOLS_NOTIFY_LISTEN_H

/* Binds SOCKET (a path; an old socket there is replaced), then prints "PID KEY=VALUE"
 * on stdout for each line of each datagram, PID being the sender's as the kernel gives
 * it, until SIGTERM or SIGINT, which remove the socket. */
int notify_listen_main(int argc, char **argv);

#endif
