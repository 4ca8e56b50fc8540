# Intel PT packet opcodes, sizes and payload layouts (declarations only).
#
# Layer: pt_decoder, below packet.pyx; mirrors the hardware format and adds
# no logic. Source: Intel SDM Vol. 3C, chapter "Intel Processor Trace",
# section "Trace Packets and Data Types" (the packet table and one
# subsection per packet). Packets newer than the PT chapter of 2016 (BBP, BIP,
# BEP: "PEBS via PT"; CFE, EVD: "Event Trace"; TRIG: "Trigger Tracing") come
# from the same chapter of later SDM editions.
#
# Byte 0 of every packet is the opcode; 0x02 introduces a two-byte opcode
# whose second byte is the "ext" code below, and ext 0xC3 a third byte.

cdef enum:
    # ---- one-byte opcodes (byte 0) ----
    OPC_PAD = 0x00
    OPC_EXT = 0x02            # two-byte opcodes; PSB starts with it too
    OPC_TIP = 0x0D            # low 5 bits; IPBytes in bits 7:5
    OPC_TIP_PGE = 0x11
    OPC_TIP_PGD = 0x01
    OPC_FUP = 0x1D
    OPC_MODE = 0x99
    OPC_TSC = 0x19
    OPC_MTC = 0x59
    OPC_CYC = 0x03            # low 2 bits = 11b
    OPC_TRIG = 0xD9           # Trigger Tracing; unknown to libipt 2.0.5

    # ---- opcode masks ----
    OPM_IP = 0x1F             # TIP/TIP.PGE/TIP.PGD/FUP opcode bits
    OPM_IPC_SHR = 5           # IPBytes field: byte0 >> 5
    OPM_TNT8 = 0x01           # TNT-8: bit 0 clear (0x00 PAD, 0x02 EXT excluded)
    OPM_CYC = 0x03
    OPM_CYC_EXT = 0x04        # byte 0 bit 2: another CYC byte follows
    OPM_CYC_SHR = 3           # byte 0 bits 7:3 = cycle count bits 4:0
    OPM_CYCX_EXT = 0x01       # later bytes: bit 0 = another byte follows
    OPM_CYCX_SHR = 1          # later bytes: bits 7:1 = 7 more count bits
    OPM_BIP = 0x07            # BIP header low 3 bits, inside a BBP block
    OPC_BIP = 0x04

    # ---- ext codes (byte 1 after 0x02) ----
    EXT_PSB = 0x82
    EXT_TNT64 = 0xA3
    EXT_PIP = 0x43
    EXT_OVF = 0xF3
    EXT_PSBEND = 0x23
    EXT_CBR = 0x03
    EXT_TMA = 0x73
    EXT_STOP = 0x83           # TraceStop
    EXT_VMCS = 0xC8
    EXT_EXT2 = 0xC3           # three-byte opcodes (MNT)
    EXT_EXSTOP = 0x62
    EXT_EXSTOP_IP = 0xE2
    EXT_MWAIT = 0xC2
    EXT_PWRE = 0x22
    EXT_PWRX = 0xA2
    EXT_PTW = 0x12            # low 5 bits; bit 7 = IP, bits 6:5 = PayloadBytes
    EXTM_PTW = 0x1F
    EXT_PTW_IP = 0x80
    EXT_PTW_PB_SHR = 5
    EXT_BBP = 0x63            # PEBS via PT: Block Begin
    EXT_BEP = 0x33            # Block End; 0xB3 = with IP bit
    EXT_BEP_IP = 0xB3
    EXT_CFE = 0x13            # Event Trace: Control Flow Event
    EXT_EVD = 0x53            # Event Trace: Event Data

    # ---- ext2 codes (byte 2 after 0x02 0xC3) ----
    EXT2_MNT = 0x88

    # ---- PSB: 0x02 0x82 repeated 8 times ----
    PSB_HI = 0x02
    PSB_LO = 0x82

    # ---- packet sizes in bytes ----
    PS_PAD = 1
    PS_TNT8 = 1
    PS_MODE = 2
    PS_MTC = 2
    PS_TSC = 8
    PS_PSB = 16
    PS_PSBEND = 2
    PS_OVF = 2
    PS_STOP = 2
    PS_PIP = 8
    PS_TNT64 = 8
    PS_CBR = 4
    PS_TMA = 7
    PS_VMCS = 7
    PS_MNT = 11
    PS_EXSTOP = 2
    PS_MWAIT = 10
    PS_PWRE = 4
    PS_PWRX = 7
    PS_PTW32 = 6
    PS_PTW64 = 10
    PS_BBP = 3
    PS_BIP4 = 5
    PS_BIP8 = 9
    PS_BEP = 2
    PS_CFE = 4
    PS_EVD = 11
    PS_TRIG = 3               # + 2 when the ICNTV bit is set
    PS_CYC_MAX = 15

    # ---- payload layouts ----
    PL_PIP_NR = 0x01          # PIP payload bit 0 = NR (non-root)
    PL_PIP_SHR = 1            # CR3[51:5] = payload[47:1]
    PL_PIP_SHL = 5
    PL_VMCS_SHL = 12          # VMCS payload = base[51:12]
    PL_TMA_FC_MASK = 0x1FF    # FastCounter is 9 bits; byte 4 reserved (0)
    PL_MODE_LEAF = 0xE0       # MODE payload bits 7:5 = leaf
    PL_MODE_BITS = 0x1F
    PL_MODE_EXEC = 0x00       # bit 0 CS.L, bit 1 CS.D, bit 2 IF (newer CPUs)
    PL_MODE_TSX = 0x20        # bit 0 InTX, bit 1 TXAbort
    PL_EXSTOP_IP = 0x80
    PL_PWRE_HW = 0x0008       # 16-bit payload: bit 3 HW, 11:8 sub-state, 15:12 state
    PL_PWRX_WR_SHR = 8        # 40-bit payload: 3:0 deepest, 7:4 last, 11:8 wake reason
    PL_BBP_SZ = 0x80          # BBP byte 2: bit 7 SZ (1: 4-byte items), 4:0 type
    PL_BBP_TYPE = 0x1F
    PL_CFE_IP = 0x80          # CFE byte 2: bit 7 IP, 4:0 type; byte 3 vector
    PL_CFE_TYPE = 0x1F
    PL_EVD_TYPE = 0x3F        # EVD byte 2: bits 5:0 type (6 bits, as perf reads it)
    PL_TRIG_IP = 0x80         # TRIG byte 1: bit 7 IP, 6 ICNTV, 5 MULT; byte 2 TRBV
    PL_TRIG_ICNTV = 0x40
    PL_TRIG_MULT = 0x20

    # ---- IP compression (IPBytes) ----
    IPC_SUPPRESSED = 0
    IPC_UPDATE_16 = 1
    IPC_UPDATE_32 = 2
    IPC_SEXT_48 = 3
    IPC_UPDATE_48 = 4
    IPC_FULL = 6              # 5 and 7 are reserved
