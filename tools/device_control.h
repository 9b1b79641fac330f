/* rampartctl device SOCKET ...: a running device's control socket (device_control.c). */
#ifndef RAMPART_TOOLS_DEVICE_CONTROL_H
#define RAMPART_TOOLS_DEVICE_CONTROL_H

/* argv: the words after SOCKET (none: servers). Returns rampartctl's exit status. */
int device_control_main(const char *socket_path, int argc, char **argv);

#endif
