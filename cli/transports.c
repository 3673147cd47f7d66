/* SPDX-License-Identifier: MIT */
/* transports.c - the registry: a new transport is one file plus one line here. */
#include <string.h>
#include "bench.h"

extern const struct transport tr_uds_epoll, tr_pipe, tr_eventfd, tr_futex, tr_shm_spin, tr_shm_yield,
	tr_rpal_connected, tr_rpal_hosted;
extern const struct transport tr_go_uds, tr_rpal_go, tr_grpc_uds, tr_grpc_rpal, tr_kitex_uds,
	tr_kitex_rpal;

/* Order of the table: the RFC's baseline first, the floor before rpal. */
const struct transport *const transports[] = {
	&tr_uds_epoll, &tr_pipe, &tr_eventfd, &tr_futex, &tr_shm_spin, &tr_shm_yield,
	&tr_rpal_connected, &tr_rpal_hosted,
	&tr_go_uds, &tr_rpal_go, &tr_grpc_uds, &tr_grpc_rpal, &tr_kitex_uds, &tr_kitex_rpal,
};
const unsigned nr_transports = sizeof(transports) / sizeof(transports[0]);

int transport_find(const char *name)
{
	for (unsigned i = 0; i < nr_transports; i++)
		if (!strcmp(transports[i]->name, name))
			return (int)i;
	return -1;
}
