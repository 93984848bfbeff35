/* A hostile host on the fabric, for tests/it/real_kernel_probe.rs: sends COUNT UD messages of
 * SIZE bytes from DEVICE (port 1, the RoCE v2 GID of SOURCE_IPV4) to the probe responder that
 * the exporter publishes for TARGET_DEVICE in ADDRESS_JSON (its /probe-address answer). The
 * first 32 bytes are a well-formed probe (so a 32-byte message is one), the rest padding.
 *
 *   hostile DEVICE SOURCE_IPV4 ADDRESS_JSON TARGET_DEVICE SIZE COUNT
 *
 * Built by the test against rdma-core's verbs.h (libibverbs-dev) and run in the guest; it is a
 * foreign sender on purpose, sharing no code with the exporter. Prints what it sent. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what) {
	perror(what);
	exit(1);
}

/* The value after `"key":` at or after `from`, as text (a string without its quotes). */
static int field(const char *from, const char *key, char *out, size_t len) {
	char pattern[64];
	snprintf(pattern, sizeof pattern, "\"%s\":", key);
	const char *at = strstr(from, pattern);
	if (!at)
		return -1;
	at += strlen(pattern);
	if (*at == '"')
		at++;
	size_t n = strcspn(at, "\",}");
	if (n >= len)
		return -1;
	memcpy(out, at, n);
	out[n] = 0;
	return 0;
}

int main(int argc, char **argv) {
	if (argc != 7) {
		fprintf(stderr, "usage: hostile DEVICE SOURCE_IPV4 ADDRESS_JSON TARGET_DEVICE SIZE COUNT\n");
		return 2;
	}
	const char *device = argv[1];
	size_t size = strtoul(argv[5], NULL, 10);
	int count = atoi(argv[6]);
	struct in_addr source;
	if (inet_pton(AF_INET, argv[2], &source) != 1 || size < 32 || size > 4096 || count < 1) {
		fprintf(stderr, "hostile: bad arguments\n");
		return 2;
	}

	/* The target's GID, QPN and Q_Key from the published addresses. */
	static char json[1 << 16];
	FILE *file = fopen(argv[3], "r");
	if (!file)
		die(argv[3]);
	size_t read = fread(json, 1, sizeof json - 1, file);
	json[read] = 0;
	fclose(file);
	char needle[80], gid_text[64], qpn_text[16], qkey_text[16];
	snprintf(needle, sizeof needle, "\"device\":\"%s\"", argv[4]);
	const char *entry = strstr(json, needle);
	if (!entry || field(entry, "gid", gid_text, sizeof gid_text) ||
	    field(entry, "qpn", qpn_text, sizeof qpn_text) ||
	    field(entry, "qkey", qkey_text, sizeof qkey_text)) {
		fprintf(stderr, "hostile: no address of %s in %s\n", argv[4], argv[3]);
		return 1;
	}
	union ibv_gid dgid;
	for (int i = 0; i < 8; i++) {
		unsigned group;
		if (sscanf(gid_text + 5 * i, "%4x", &group) != 1)
			return 1;
		dgid.raw[2 * i] = group >> 8;
		dgid.raw[2 * i + 1] = group & 0xff;
	}
	uint32_t qpn = strtoul(qpn_text, NULL, 10), qkey = strtoul(qkey_text, NULL, 10);

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), device))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_port_attr port;
	if (ibv_query_port(ctx, 1, &port))
		die("ibv_query_port");
	int sgid_index = -1;
	for (int i = 0; i < port.gid_tbl_len && sgid_index < 0; i++) {
		struct ibv_gid_entry gid;
		if (ibv_query_gid_ex(ctx, 1, i, &gid, 0) || gid.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (!memcmp(gid.gid.raw + 12, &source, 4) && gid.gid.raw[10] == 0xff)
			sgid_index = i;
	}
	if (sgid_index < 0) {
		fprintf(stderr, "hostile: %s has no RoCE v2 GID for %s\n", device, argv[2]);
		return 1;
	}

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buffer[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * count + 2, NULL, NULL, 0);
	if (!mr || !cq)
		die("ibv_reg_mr/ibv_create_cq");
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = {.max_send_wr = count + 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT");
	attr.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE))
		die("RTR");
	attr.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("RTS");
	struct ibv_ah_attr ah_attr = {
		.is_global = 1, .port_num = 1,
		.grh = {.dgid = dgid, .sgid_index = sgid_index, .hop_limit = 64},
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
	if (!ah)
		die("ibv_create_ah");

	/* A probe of format version 1 ("RFEP", 1, kind 1, sequence), then padding. */
	memset(buffer, 0xa5, size);
	memcpy(buffer, "RFEP\x01\x01\x00\x00", 8);
	for (int i = 8; i < 32; i++)
		buffer[i] = 0;
	int sent = 0, completed = 0, failed = 0;
	for (int i = 0; i < count; i++) {
		buffer[15] = (char)i;
		struct ibv_sge sge = {.addr = (uintptr_t)buffer, .length = size, .lkey = mr->lkey};
		struct ibv_send_wr wr = {
			.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.ud = {.ah = ah, .remote_qpn = qpn, .remote_qkey = qkey},
		}, *bad;
		if (ibv_post_send(qp, &wr, &bad))
			break;
		sent++;
		/* One at a time: the buffer is reused. */
		struct timespec start, now;
		clock_gettime(CLOCK_MONOTONIC, &start);
		for (;;) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(cq, 1, &wc);
			if (n > 0) {
				completed++;
				failed += wc.status != IBV_WC_SUCCESS;
				break;
			}
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - start.tv_sec > 2)
				break;
		}
	}
	printf("hostile: %s -> %s qpn %u: %d of %d sends of %zu bytes posted, %d completed, %d failed\n",
	       device, argv[4], qpn, sent, count, size, completed, failed);
	ibv_destroy_qp(qp);
	ibv_destroy_ah(ah);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return sent == count ? 0 : 1;
}
