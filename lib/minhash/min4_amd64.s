//go:build !purego

#include "textflag.h"

// func min4(sh []uint64, ab *[8]uint64, out *[4]uint64)
//
// out[i] = min over s in sh of ab[i]*s + ab[4+i] (mod 2^64), for i < 4;
// all ones for an empty sh. The four minima and multipliers stay in
// registers; s and the addends are read from memory, which the cache
// serves faster than the compiler's spills of the same loop in Go.
TEXT ·min4(SB), NOSPLIT, $0-40
	MOVQ sh_base+0(FP), SI
	MOVQ sh_len+8(FP), CX
	MOVQ ab+24(FP), DI
	MOVQ 0(DI), R8
	MOVQ 8(DI), R9
	MOVQ 16(DI), R10
	MOVQ 24(DI), R11
	MOVQ $-1, R12
	MOVQ $-1, R13
	MOVQ $-1, AX
	MOVQ $-1, BX
	TESTQ CX, CX
	JZ done

loop:
	MOVQ (SI), DX
	IMULQ R8, DX
	ADDQ 32(DI), DX
	CMPQ DX, R12
	CMOVQCS DX, R12
	MOVQ (SI), DX
	IMULQ R9, DX
	ADDQ 40(DI), DX
	CMPQ DX, R13
	CMOVQCS DX, R13
	MOVQ (SI), DX
	IMULQ R10, DX
	ADDQ 48(DI), DX
	CMPQ DX, AX
	CMOVQCS DX, AX
	MOVQ (SI), DX
	IMULQ R11, DX
	ADDQ 56(DI), DX
	CMPQ DX, BX
	CMOVQCS DX, BX
	ADDQ $8, SI
	DECQ CX
	JNZ loop

done:
	MOVQ out+32(FP), DI
	MOVQ R12, 0(DI)
	MOVQ R13, 8(DI)
	MOVQ AX, 16(DI)
	MOVQ BX, 24(DI)
	RET
