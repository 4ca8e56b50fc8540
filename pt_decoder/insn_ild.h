/* x86 instruction length decoder and branch classifier (C, no allocation).
 *
 * Layer: pt_decoder, used by insn.pyx only to BUILD its block cache (once per
 * basic block, never per executed instruction). It knows x86 encoding
 * (Intel SDM Vol. 2, chapter 2 "Instruction Format" and appendix A "Opcode
 * Map") and nothing of Intel PT.
 *
 * ild_decode() finds an instruction's length from its prefixes, opcode map,
 * ModRM/SIB, displacement and immediate, and classifies what matters to the
 * flow reconstruction: near/far call, return, jump, conditional jump, the
 * instructions that change CPL or CR3 (syscall/sysret, int, iret, mov cr3,
 * VMX entries), and PTWRITE. The classes are libipt's (enum pt_insn_class)
 * so that behaviour on the same bytes matches libipt's decoder.
 */
#ifndef PTDEBUG_INSN_ILD_H
#define PTDEBUG_INSN_ILD_H

#include <stdint.h>
#include <string.h>

enum ild_class {
    ILD_ERROR = 0, ILD_OTHER = 1, ILD_CALL = 2, ILD_RETURN = 3, ILD_JUMP = 4,
    ILD_COND_JUMP = 5, ILD_FAR_CALL = 6, ILD_FAR_RETURN = 7, ILD_FAR_JUMP = 8,
    ILD_PTWRITE = 9
};

enum ild_ext {
    ILDX_NONE = 0, ILDX_INT, ILDX_INT3, ILDX_INT1, ILDX_INTO, ILDX_IRET,
    ILDX_SYSCALL, ILDX_SYSENTER, ILDX_SYSEXIT, ILDX_SYSRET, ILDX_MOV_CR3,
    ILDX_VMLAUNCH, ILDX_VMRESUME, ILDX_VMCALL, ILDX_VMPTRLD, ILDX_UIRET,
    ILDX_CALL_IND, ILDX_JMP_IND
};

typedef struct {
    uint8_t len;        /* instruction length in bytes */
    uint8_t iclass;     /* enum ild_class */
    uint8_t ext;        /* enum ild_ext */
    uint8_t is_direct;  /* branch target is ip + len + disp */
    int32_t disp;       /* branch displacement */
} ild_insn;

/* Execution modes as the event layer's ExecMode. */
#define ILD_MODE_16 1
#define ILD_MODE_32 2
#define ILD_MODE_64 3

/* One-byte map: 1 = has ModRM. */
static const uint8_t ild_modrm_map0[256] = {
/*       0 1 2 3 4 5 6 7 8 9 a b c d e f */
/* 0 */  1,1,1,1,0,0,0,0,1,1,1,1,0,0,0,0,
/* 1 */  1,1,1,1,0,0,0,0,1,1,1,1,0,0,0,0,
/* 2 */  1,1,1,1,0,0,0,0,1,1,1,1,0,0,0,0,
/* 3 */  1,1,1,1,0,0,0,0,1,1,1,1,0,0,0,0,
/* 4 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* 5 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* 6 */  0,0,1,1,0,0,0,0,0,1,0,1,0,0,0,0,
/* 7 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* 8 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 9 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* a */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* b */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* c */  1,1,0,0,1,1,1,1,0,0,0,0,0,0,0,0,
/* d */  1,1,1,1,0,0,0,0,1,1,1,1,1,1,1,1,
/* e */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* f */  0,0,0,0,0,0,1,1,0,0,0,0,0,0,1,1,
};

/* Two-byte map (0F xx): 1 = has ModRM. */
static const uint8_t ild_modrm_map1[256] = {
/*       0 1 2 3 4 5 6 7 8 9 a b c d e f */
/* 0 */  1,1,1,1,0,0,0,0,0,0,0,0,0,1,0,1,
/* 1 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 2 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 3 */  0,0,0,0,0,0,0,0,1,0,1,0,0,0,0,0,
/* 4 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 5 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 6 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 7 */  1,1,1,1,1,1,1,0,1,1,1,1,1,1,1,1,
/* 8 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* 9 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* a */  0,0,0,1,1,1,1,1,0,0,0,1,1,1,1,1,
/* b */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* c */  1,1,1,1,1,1,1,1,0,0,0,0,0,0,0,0,
/* d */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* e */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* f */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
};

/* Immediate kinds of the one-byte map. */
enum { I_NONE = 0, I_B = 1, I_Z = 2, I_W = 3, I_MOV = 4, I_ENTER = 5, I_FAR = 6, I_MOFFS = 7, I_GRP3 = 8 };
static const uint8_t ild_imm_map0[256] = {
/*       0 1 2 3 4 5 6 7 8 9 a b c d e f */
/* 0 */  0,0,0,0,1,2,0,0,0,0,0,0,1,2,0,0,
/* 1 */  0,0,0,0,1,2,0,0,0,0,0,0,1,2,0,0,
/* 2 */  0,0,0,0,1,2,0,0,0,0,0,0,1,2,0,0,
/* 3 */  0,0,0,0,1,2,0,0,0,0,0,0,1,2,0,0,
/* 4 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* 5 */  0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
/* 6 */  0,0,0,0,0,0,0,0,2,2,1,1,0,0,0,0,
/* 7 */  1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
/* 8 */  1,2,1,1,0,0,0,0,0,0,0,0,0,0,0,0,
/* 9 */  0,0,0,0,0,0,0,0,0,0,6,0,0,0,0,0,
/* a */  7,7,7,7,0,0,0,0,1,2,0,0,0,0,0,0,
/* b */  1,1,1,1,1,1,1,1,4,4,4,4,4,4,4,4,
/* c */  1,1,3,0,0,0,1,2,5,0,3,0,0,1,0,0,
/* d */  0,0,0,0,1,1,0,0,0,0,0,0,0,0,0,0,
/* e */  1,1,1,1,1,1,1,1,2,2,6,1,0,0,0,0,
/* f */  0,0,0,0,0,0,8,8,0,0,0,0,0,0,0,0,
};

static inline int ild_is_legacy_prefix(uint8_t b)
{
    switch (b) {
    case 0x26: case 0x2e: case 0x36: case 0x3e: case 0x64: case 0x65:
    case 0x66: case 0x67: case 0xf0: case 0xf2: case 0xf3:
        return 1;
    }
    return 0;
}

/* Length of ModRM + SIB + displacement at `p` (ModRM included); -1 if truncated.
 * *disp_len receives the displacement size. */
static inline int ild_modrm_len(const uint8_t *p, int avail, int addr16, int force_reg)
{
    uint8_t modrm, mod, rm;
    int len = 1;

    if (avail < 1)
        return -1;
    modrm = p[0];
    mod = modrm >> 6;
    rm = modrm & 7;
    if (force_reg || mod == 3)
        return 1;
    if (addr16) {
        if (mod == 0 && rm == 6)
            len += 2;
        else if (mod == 1)
            len += 1;
        else if (mod == 2)
            len += 2;
        return len <= avail ? len : -1;
    }
    if (rm == 4) {
        if (avail < 2)
            return -1;
        len += 1;
        if (mod == 0 && (p[1] & 7) == 5)
            len += 4;
    }
    if (mod == 0 && rm == 5)
        len += 4;
    else if (mod == 1)
        len += 1;
    else if (mod == 2)
        len += 4;
    return len <= avail ? len : -1;
}

static inline int32_t ild_read_disp(const uint8_t *p, int size)
{
    if (size == 1)
        return (int8_t) p[0];
    if (size == 2)
        return (int16_t) (p[0] | (p[1] << 8));
    return (int32_t) ((uint32_t) p[0] | ((uint32_t) p[1] << 8) | ((uint32_t) p[2] << 16) |
                      ((uint32_t) p[3] << 24));
}

/* Decode the instruction at `buf` (`avail` readable bytes, at most 15 used) in
 * `mode`. Returns 0 and fills *out, or -1 if the bytes are not a complete
 * valid instruction (libipt's -pte_bad_insn). */
static int ild_decode(const uint8_t *buf, int avail, int mode, ild_insn *out)
{
    int pos = 0, osz = 0, asz = 0, f3 = 0, rex = 0, map = 0, vex = 0;
    int opsize16, addr16, has_modrm, modrm_pos = -1, imm = 0, len;
    uint8_t op, modrm = 0, reg = 0, mod = 0;

    memset(out, 0, sizeof(*out));
    if (avail > 15)
        avail = 15;
    if (mode < ILD_MODE_16 || mode > ILD_MODE_64)
        return -1;

    /* Legacy prefixes, then REX (64-bit mode) directly before the opcode. */
    for (;;) {
        if (pos >= avail)
            return -1;
        op = buf[pos];
        if (ild_is_legacy_prefix(op)) {
            if (op == 0x66)
                osz = 1;
            else if (op == 0x67)
                asz = 1;
            else if (op == 0xf3)
                f3 = 1;
            rex = 0;    /* a REX before a legacy prefix is ignored */
            pos++;
            continue;
        }
        if (mode == ILD_MODE_64 && (op & 0xf0) == 0x40) {
            rex = op;
            pos++;
            continue;
        }
        break;
    }

    if (mode == ILD_MODE_64)
        addr16 = 0;
    else if (mode == ILD_MODE_32)
        addr16 = asz;
    else
        addr16 = !asz;
    if (mode == ILD_MODE_16)
        opsize16 = !osz;
    else
        opsize16 = osz && !(rex & 8);

    op = buf[pos++];
    /* VEX (C4/C5) and EVEX (62): in 64-bit mode always; else only when the
     * next byte's ModRM.mod would be 3 (otherwise LES/LDS/BOUND). */
    if ((op == 0xc4 || op == 0xc5 || op == 0x62) && pos < avail &&
        (mode == ILD_MODE_64 || (buf[pos] & 0xc0) == 0xc0)) {
        vex = 1;
        if (op == 0xc5) {
            map = 1;
            pos += 1;
        } else if (op == 0xc4) {
            map = buf[pos] & 0x1f;
            pos += 2;
        } else {
            map = buf[pos] & 0x07;
            pos += 3;
        }
        if (map < 1 || map > 7 || pos >= avail)
            return -1;
        op = buf[pos++];
        has_modrm = !(map == 1 && op == 0x77);
        if (map == 3)
            imm = 1;
        else if (map == 1 && ((op >= 0x70 && op <= 0x73) || op == 0xc2 || op == 0xc4 || op == 0xc5 ||
                              op == 0xc6))
            imm = 1;
        if (has_modrm) {
            modrm_pos = pos;
            len = ild_modrm_len(buf + pos, avail - pos, addr16, 0);
            if (len < 0)
                return -1;
            pos += len;
        }
        pos += imm;
        if (pos > avail)
            return -1;
        out->len = (uint8_t) pos;
        out->iclass = ILD_OTHER;
        return 0;
    }

    if (op == 0x0f) {
        if (pos >= avail)
            return -1;
        op = buf[pos++];
        if (op == 0x38 || op == 0x3a) {
            map = op == 0x38 ? 2 : 3;
            if (pos >= avail)
                return -1;
            op = buf[pos++];
            has_modrm = 1;
            imm = map == 3 ? 1 : 0;
        } else if (op == 0x0f) {
            /* 3DNow!: ModRM, then the opcode as an 8-bit suffix. */
            map = 1;
            has_modrm = 1;
            imm = 1;
            op = 0x0f;
        } else {
            map = 1;
            has_modrm = ild_modrm_map1[op];
            if ((op >= 0x70 && op <= 0x73) || op == 0xa4 || op == 0xac || op == 0xba ||
                op == 0xc2 || op == 0xc4 || op == 0xc5 || op == 0xc6)
                imm = 1;
            else if (op >= 0x80 && op <= 0x8f)
                imm = (mode == ILD_MODE_64) ? 4 : (opsize16 ? 2 : 4);
        }
    } else {
        map = 0;
        has_modrm = ild_modrm_map0[op];
    }

    if (has_modrm) {
        int force_reg = (map == 1 && op >= 0x20 && op <= 0x26);   /* MOV CR/DR/TR: always registers */
        if (pos >= avail)
            return -1;
        modrm_pos = pos;
        modrm = buf[pos];
        mod = modrm >> 6;
        reg = (modrm >> 3) & 7;
        len = ild_modrm_len(buf + pos, avail - pos, addr16, force_reg);
        if (len < 0)
            return -1;
        pos += len;
    }

    if (map == 0) {
        switch (ild_imm_map0[op]) {
        case I_B: imm = 1; break;
        case I_Z: imm = opsize16 ? 2 : 4; break;
        case I_W: imm = 2; break;
        case I_ENTER: imm = 3; break;
        case I_MOV: imm = (rex & 8) ? 8 : (opsize16 ? 2 : 4); break;
        case I_FAR: imm = (opsize16 ? 2 : 4) + 2; break;
        case I_MOFFS:
            imm = mode == ILD_MODE_64 ? (asz ? 4 : 8) : (addr16 ? 2 : 4);
            break;
        case I_GRP3: imm = (reg < 2) ? (op == 0xf6 ? 1 : (opsize16 ? 2 : 4)) : 0; break;
        default: imm = 0; break;
        }
        /* Near branches ignore the operand-size prefix in 64-bit mode. */
        if ((op == 0xe8 || op == 0xe9) && mode == ILD_MODE_64)
            imm = 4;
    }
    pos += imm;
    if (pos > avail)
        return -1;
    out->len = (uint8_t) pos;
    out->iclass = ILD_OTHER;

    /* Classification (only maps 0 and 1 hold control transfers). */
    if (map == 0) {
        if ((op >= 0x70 && op <= 0x7f) || (op >= 0xe0 && op <= 0xe3)) {
            out->iclass = ILD_COND_JUMP;
            out->is_direct = 1;
            out->disp = ild_read_disp(buf + pos - 1, 1);
            return 0;
        }
        switch (op) {
        case 0xe8: case 0xe9: case 0xeb:
            out->iclass = op == 0xe8 ? ILD_CALL : ILD_JUMP;
            out->is_direct = 1;
            out->disp = ild_read_disp(buf + pos - imm, imm);
            return 0;
        case 0xff:
            if (reg == 2) { out->iclass = ILD_CALL; out->ext = ILDX_CALL_IND; }
            else if (reg == 3) out->iclass = ILD_FAR_CALL;
            else if (reg == 4) { out->iclass = ILD_JUMP; out->ext = ILDX_JMP_IND; }
            else if (reg == 5) out->iclass = ILD_FAR_JUMP;
            return 0;
        case 0x9a: out->iclass = ILD_FAR_CALL; return 0;
        case 0xea: out->iclass = ILD_FAR_JUMP; return 0;
        case 0xcd: out->iclass = ILD_FAR_CALL; out->ext = ILDX_INT; return 0;
        case 0xcc: out->iclass = ILD_FAR_CALL; out->ext = ILDX_INT3; return 0;
        case 0xce: out->iclass = ILD_FAR_CALL; out->ext = ILDX_INTO; return 0;
        case 0xf1: out->iclass = ILD_FAR_CALL; out->ext = ILDX_INT1; return 0;
        case 0xcf: out->iclass = ILD_FAR_RETURN; out->ext = ILDX_IRET; return 0;
        case 0xc2: case 0xc3: out->iclass = ILD_RETURN; return 0;
        case 0xca: case 0xcb: out->iclass = ILD_FAR_RETURN; return 0;
        }
        return 0;
    }
    if (map == 1) {
        if (op >= 0x80 && op <= 0x8f) {
            out->iclass = ILD_COND_JUMP;
            out->is_direct = 1;
            out->disp = ild_read_disp(buf + pos - imm, imm);
            return 0;
        }
        switch (op) {
        case 0x05: out->iclass = ILD_FAR_CALL; out->ext = ILDX_SYSCALL; return 0;
        case 0x34: out->iclass = ILD_FAR_CALL; out->ext = ILDX_SYSENTER; return 0;
        case 0x35: out->iclass = ILD_FAR_RETURN; out->ext = ILDX_SYSEXIT; return 0;
        case 0x07: out->iclass = ILD_FAR_RETURN; out->ext = ILDX_SYSRET; return 0;
        case 0x22:
            if (reg == 3 && !(rex & 4))
                out->ext = ILDX_MOV_CR3;
            return 0;
        case 0x01:
            if (modrm == 0xc1) { out->iclass = ILD_FAR_CALL; out->ext = ILDX_VMCALL; }
            else if (modrm == 0xc2) { out->iclass = ILD_FAR_RETURN; out->ext = ILDX_VMLAUNCH; }
            else if (modrm == 0xc3) { out->iclass = ILD_FAR_RETURN; out->ext = ILDX_VMRESUME; }
            return 0;
        case 0xc7:
            if (mod != 3 && reg == 6)
                out->ext = ILDX_VMPTRLD;
            return 0;
        case 0xae:
            if (f3 && !osz && reg == 4)
                out->iclass = ILD_PTWRITE;
            return 0;
        }
    }
    (void) modrm_pos;
    (void) vex;
    return 0;
}

#endif /* PTDEBUG_INSN_ILD_H */
