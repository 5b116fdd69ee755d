/*
 * bench.h: what p2p.c and coll.c share: option parsing (sizes with k/m/g
 * suffixes, comma-separated lists), and the JSON document `courier bench
 * -json` writes (schema courier-bench/1), so that MPI runs can be plotted
 * and tabulated beside courier's (courier plot, courier bench -compare).
 *
 * The document, as courier's internal/bench/json.go defines it:
 *
 *   {"schema": "courier-bench/1",
 *    "header": {"program", "label", "backend": "mpi", "transport",
 *               "library", "ranks", "date", "host", "command": [...],
 *               "env": {...}, "memory": "host", "pattern", "window",
 *               "reps", "init_us"},
 *    "p2p":  [{"kind": "latency", "bytes", "latency_us", "gbps"},
 *             {"kind": "bandwidth", "bytes", "gbps"}, ...],
 *    "coll": [{"name", "bytes", "time_us", "algbw_gbps", "busbw_gbps"}, ...]}
 *
 * Everything here is static: each program includes it once.
 */
#ifndef COURIER_BENCH_MPI_BENCH_H
#define COURIER_BENCH_MPI_BENCH_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* MPICH's MPI_STATUSES_IGNORE is (MPI_Status *)1, which GCC 11 and later
 * take for an array of size 0 passed where one is written (a false
 * -Wstringop-overflow at every MPI_Waitall). */
#if defined(__GNUC__) && !defined(__clang__) && defined(MPICH)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

/* parseSize reads "512", "128k", "2m" or "1g"; 0 when it is not one, or
 * more than max bytes. */
static size_t parseSize(const char *s, size_t max) {
	char *end;
	if (*s < '0' || *s > '9') return 0;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (*end != '\0' || v == 0 || v > (unsigned long long)max >> shift) return 0;
	return (size_t)(v << shift);
}

/* parsePositive reads a whole number from 1 to 1000000000; 0 when not. */
static int parsePositive(const char *s) {
	char *end;
	if (*s < '0' || *s > '9') return 0;
	long v = strtol(s, &end, 10);
	if (*end != '\0' || v < 1 || v > 1000000000L) return 0;
	return (int)v;
}

/* splitList calls add on each comma-separated item of list; 0 when add
 * refuses one or an item is empty. */
static int splitList(const char *list, int (*add)(const char *)) {
	char *copy = strdup(list), *save = NULL;
	int ok = copy != NULL && *list != '\0' && list[strlen(list) - 1] != ',' && strstr(list, ",,") == NULL && list[0] != ',';
	for (char *tok = ok ? strtok_r(copy, ",", &save) : NULL; ok && tok; tok = strtok_r(NULL, ",", &save)) ok = add(tok);
	free(copy);
	return ok;
}

/* wallSeconds is a monotonic clock, for what happens before MPI_Init. */
static double wallSeconds(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* jsonString writes s as a JSON string. */
static void jsonString(FILE *f, const char *s) {
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (*p < 0x20) fprintf(f, "\\u%04x", *p);
			else fputc(*p, f);
		}
	}
	fputc('"', f);
}

/* jsonNumber writes x as a JSON number (%.17g reads back exactly; JSON
 * has no infinity or NaN: they are written as 0). */
static void jsonNumber(FILE *f, double x) {
	if (x != x || x > 1e308 || x < -1e308) x = 0;
	fprintf(f, "%.17g", x);
}

/* A run's header: what the document's "header" object holds. */
struct runHeader {
	const char *program, *label, *transport, *pattern;
	char library[256], date[32], host[256];
	int ranks, window, reps, argc;
	char **argv;
	double initMicros;
};

/* mpiLibrary fills h->library with the first line of
 * MPI_Get_library_version, and returns a short name for a default label
 * in name (at most n bytes): the line up to its first comma, "Version:"
 * dropped, blanks squeezed ("Open MPI v4.1.4", "MPICH 4.0.2"). */
static void mpiLibrary(struct runHeader *h, char *name, size_t n) {
	char v[MPI_MAX_LIBRARY_VERSION_STRING];
	int len = 0;
	MPI_Get_library_version(v, &len);
	v[strcspn(v, "\r\n")] = '\0';
	size_t l = strnlen(v, sizeof h->library - 1);
	memcpy(h->library, v, l);
	h->library[l] = '\0';
	v[strcspn(v, ",")] = '\0';
	char *ver = strstr(v, "Version:");
	if (ver) memset(ver, ' ', strlen("Version:"));
	size_t o = 0;
	int blank = 1;
	for (const char *p = v; *p && o + 1 < n; p++) {
		int b = *p == ' ' || *p == '\t';
		if (b && blank) continue;
		name[o++] = b ? ' ' : *p;
		blank = b;
	}
	while (o > 0 && name[o - 1] == ' ') o--;
	name[o] = '\0';
}

/* startHeader fills what is known before MPI_Init: the date, the host and
 * the command line. */
static void startHeader(struct runHeader *h, const char *program, int argc, char **argv) {
	memset(h, 0, sizeof *h);
	h->program = program;
	h->argc = argc;
	h->argv = argv;
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(h->date, sizeof h->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (gethostname(h->host, sizeof h->host - 1) != 0) h->host[0] = '\0';
}

/* defaultTransport is the transport the environment asks for: Open MPI's
 * btl list, else UCX's transports (MPICH over UCX), else "". */
static const char *defaultTransport(void) {
	const char *t = getenv("OMPI_MCA_btl");
	if (!t || !*t) t = getenv("UCX_TLS");
	return t ? t : "";
}

/* settingVariable says whether an environment variable is a setting that
 * changes what MPI measures (not one of the launcher's own). */
static int settingVariable(const char *kv) {
	static const char *const prefixes[] = {"OMPI_MCA_btl", "OMPI_MCA_pml", "OMPI_MCA_mtl", "OMPI_MCA_coll",
		"OMPI_MCA_mpi_", "UCX_", "MPIR_CVAR_", NULL};
	if (strncmp(kv, "MPIR_CVAR_CH3_INTERFACE_HOSTNAME=", 33) == 0) return 0;
	for (int i = 0; prefixes[i]; i++)
		if (strncmp(kv, prefixes[i], strlen(prefixes[i])) == 0) return 1;
	return 0;
}

/* writeHeader writes the document's opening and its header object; the
 * caller writes the rows, then closes the document with "}\n". */
static void writeHeader(FILE *f, const struct runHeader *h) {
	fputs("{\n  \"schema\": \"courier-bench/1\",\n  \"header\": {\n    \"program\": ", f);
	jsonString(f, h->program);
	fputs(",\n    \"label\": ", f);
	jsonString(f, h->label);
	fputs(",\n    \"backend\": \"mpi\"", f);
	if (h->transport && *h->transport) {
		fputs(",\n    \"transport\": ", f);
		jsonString(f, h->transport);
	}
	fputs(",\n    \"library\": ", f);
	jsonString(f, h->library);
	fprintf(f, ",\n    \"ranks\": %d,\n    \"date\": ", h->ranks);
	jsonString(f, h->date);
	fputs(",\n    \"host\": ", f);
	jsonString(f, h->host);
	fputs(",\n    \"command\": [", f);
	for (int i = 0; i < h->argc; i++) {
		if (i > 0) fputs(", ", f);
		jsonString(f, h->argv[i]);
	}
	fputs("]", f);
	int first = 1;
	for (char **e = environ; *e; e++) {
		if (!settingVariable(*e)) continue;
		const char *eq = strchr(*e, '=');
		if (!eq) continue;
		char name[256];
		snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
		fputs(first ? ",\n    \"env\": {\n      " : ",\n      ", f);
		jsonString(f, name);
		fputs(": ", f);
		jsonString(f, eq + 1);
		first = 0;
	}
	if (!first) fputs("\n    }", f);
	fputs(",\n    \"memory\": \"host\"", f);
	if (h->pattern) {
		fputs(",\n    \"pattern\": ", f);
		jsonString(f, h->pattern);
		fprintf(f, ",\n    \"window\": %d", h->window);
	}
	fprintf(f, ",\n    \"reps\": %d,\n    \"init_us\": ", h->reps);
	jsonNumber(f, h->initMicros);
	fputs("\n  }", f);
}

/* openJSON opens where -json asks for: "-" is standard output. NULL, with
 * a message, when the file cannot be created. */
static FILE *openJSON(const char *path, const char *program) {
	if (strcmp(path, "-") == 0) return stdout;
	FILE *f = fopen(path, "w");
	if (!f) perror(program);
	return f;
}

/* closeJSON finishes f (not standard output); 0 when a write failed. */
static int closeJSON(FILE *f, const char *program) {
	int ok = fflush(f) == 0 && !ferror(f);
	if (f != stdout) ok = fclose(f) == 0 && ok;
	if (!ok) fprintf(stderr, "%s: writing the JSON document failed\n", program);
	return ok;
}

#endif
