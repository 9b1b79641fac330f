/* rampartctl device SOCKET ...: a running device's control socket (device_control.c).
 *
 * Errors: rampartctl's exit status (0, 1 or 2), its sentence already written to stderr.
 */
#ifndef RAMPART_TOOLS_DEVICE_CONTROL_H
#define RAMPART_TOOLS_DEVICE_CONTROL_H

/* argv: the words after SOCKET (none: servers). Returns rampartctl's exit status. */
int device_control_main(const char *socket_path, int argc, char **argv);

#endif
