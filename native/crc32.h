/* CRC-32 (IEEE 802.3, reflected, as zlib.crc32) for quorumlog._hotpath. */
#ifndef QUORUMLOG_CRC32_H
#define QUORUMLOG_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Fill the tables and look at the CPU; call once before the others. */
void ql_crc32_init(void);

/* zlib.crc32(data, crc): continue the CRC `crc` over n bytes at p. */
uint32_t ql_crc32(uint32_t crc, const unsigned char *p, size_t n);

/* The same by the tables alone (tests compare both ways with zlib). */
uint32_t ql_crc32_tables(uint32_t crc, const unsigned char *p, size_t n);

/* 1 when ql_crc32 folds with PCLMULQDQ on this CPU. */
int ql_crc32_folding(void);

#endif
