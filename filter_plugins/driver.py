"""The driver layer's decisions: which NVIDIA GPUs a host has without a driver, which driver branch
and kernel-module flavour drive all of them, whether to install, and how, per OS.

Plain functions (tests/unit/test_driver.py calls them without Ansible), exposed as filters:

- ``driver_pci_gpus(devices)``: the NVIDIA display devices (PCI class 0x03xx) that the
  ``driver_info`` module read from the host's sysfs, each with its architecture from ``NVIDIA_GPUS``; an id not in the table has
  ``arch: None`` and is reported, never guessed.
- ``driver_choice(gpus, branch, flavour)``: the newest branch every card supports (R580 where a
  Maxwell, Pascal or Volta card is present), and the proprietary flavour wherever a card older
  than Turing is present.
- ``driver_decision(gpus, installed, mode, os, ...)``: keep, install or stop, for
  ``driver_install`` auto, never or always, with the plan and, for a stop, the exact steps.
- ``driver_plan(os, source, branch, flavour, ...)``: the packages or the runfile, the kernel
  headers, the hold, nouveau's blacklist, per OS and ``driver_source``.

Facts behind the tables (NVIDIA's deprecation schedule and data-center driver guide): R580 is the last branch
for Maxwell, Pascal and Volta (a 590 driver does not see a P40); the open kernel modules need the
GSP of Turing and newer; since R560 NVIDIA defaults to the open flavour, so a Pascal host asks for
the proprietary one (runfile ``-m=kernel``; packages without ``-open``). CUDA 11.8, the stack's,
needs 520.61.05 or newer.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from ansible.errors import AnsibleFilterError

NVIDIA_VENDOR = 0x10DE
# The PCI display class (0x03): VGA 0x0300, XGA 0x0301, 3D controller 0x0302 (data-center cards).
DISPLAY_CLASS = 0x03

# Device id -> its name in pci.ids: every NVIDIA display device whose chip is Kepler (GK), Maxwell
# (GM), Pascal (GP), Volta (GV) or Turing (TU), copied from pci.ids version 2023.04.10 (Debian 12's
# package pci.ids 0.0~2023.04.11-1, /usr/share/misc/pci.ids), leaving out the cards' audio, USB and
# UCSI functions. The architecture is the chip's, from the name's first letters (CHIP_ARCH).
# tests/unit/test_driver.py holds every entry to the excerpt in tests/unit/samples/pci.ids/ and,
# where the host has one, to the system's pci.ids. Ampere and newer are not listed: such a card is
# reported as unknown.
PCI_IDS_VERSION = "2023.04.10"
NVIDIA_GPUS: dict[int, str] = {
    0x0FC0: "GK107 [GeForce GT 640 OEM]",
    0x0FC1: "GK107 [GeForce GT 640]",
    0x0FC2: "GK107 [GeForce GT 630 OEM]",
    0x0FC5: "GK107 [GeForce GT 1030]",
    0x0FC6: "GK107 [GeForce GTX 650]",
    0x0FC8: "GK107 [GeForce GT 740]",
    0x0FC9: "GK107 [GeForce GT 730]",
    0x0FCD: "GK107M [GeForce GT 755M]",
    0x0FCE: "GK107M [GeForce GT 640M LE]",
    0x0FD1: "GK107M [GeForce GT 650M]",
    0x0FD2: "GK107M [GeForce GT 640M]",
    0x0FD3: "GK107M [GeForce GT 640M LE]",
    0x0FD4: "GK107M [GeForce GTX 660M]",
    0x0FD5: "GK107M [GeForce GT 650M Mac Edition]",
    0x0FD6: "GK107M",
    0x0FD8: "GK107M [GeForce GT 640M Mac Edition]",
    0x0FD9: "GK107M [GeForce GT 645M]",
    0x0FDB: "GK107M",
    0x0FDF: "GK107M [GeForce GT 740M]",
    0x0FE0: "GK107M [GeForce GTX 660M Mac Edition]",
    0x0FE1: "GK107M [GeForce GT 730M]",
    0x0FE2: "GK107M [GeForce GT 745M]",
    0x0FE3: "GK107M [GeForce GT 745M]",
    0x0FE4: "GK107M [GeForce GT 750M]",
    0x0FE5: "GK107 [GeForce K340 USM]",
    0x0FE6: "GK107 [GRID K1 NVS USM]",
    0x0FE7: "GK107GL [GRID K100 vGPU]",
    0x0FE8: "GK107M [N14P-GS]",
    0x0FE9: "GK107M [GeForce GT 750M Mac Edition]",
    0x0FEA: "GK107M [GeForce GT 755M Mac Edition]",
    0x0FEC: "GK107M [GeForce 710A]",
    0x0FED: "GK107M [GeForce 820M]",
    0x0FEE: "GK107M [GeForce 810M]",
    0x0FEF: "GK107GL [GRID K340]",
    0x0FF1: "GK107 [NVS 1000]",
    0x0FF2: "GK107GL [GRID K1]",
    0x0FF3: "GK107GL [Quadro K420]",
    0x0FF5: "GK107GL [GRID K1 Tesla USM]",
    0x0FF6: "GK107GLM [Quadro K1100M]",
    0x0FF7: "GK107GL [GRID K140Q vGPU]",
    0x0FF8: "GK107GLM [Quadro K500M]",
    0x0FF9: "GK107GL [Quadro K2000D]",
    0x0FFA: "GK107GL [Quadro K600]",
    0x0FFB: "GK107GLM [Quadro K2000M]",
    0x0FFC: "GK107GLM [Quadro K1000M]",
    0x0FFD: "GK107 [NVS 510]",
    0x0FFE: "GK107GL [Quadro K2000]",
    0x0FFF: "GK107GL [Quadro 410]",
    0x1001: "GK110B [GeForce GTX TITAN Z]",
    0x1003: "GK110 [GeForce GTX Titan LE]",
    0x1004: "GK110 [GeForce GTX 780]",
    0x1005: "GK110 [GeForce GTX TITAN]",
    0x1007: "GK110 [GeForce GTX 780 Rev. 2]",
    0x1008: "GK110 [GeForce GTX 780 Ti 6GB]",
    0x100A: "GK110B [GeForce GTX 780 Ti]",
    0x100C: "GK110B [GeForce GTX TITAN Black]",
    0x101E: "GK110GL [Tesla K20X]",
    0x101F: "GK110GL [Tesla K20]",
    0x1020: "GK110GL [Tesla K20X]",
    0x1021: "GK110GL [Tesla K20Xm]",
    0x1022: "GK110GL [Tesla K20c]",
    0x1023: "GK110BGL [Tesla K40m]",
    0x1024: "GK180GL [Tesla K40c]",
    0x1026: "GK110GL [Tesla K20s]",
    0x1027: "GK110BGL [Tesla K40st]",
    0x1028: "GK110GL [Tesla K20m]",
    0x1029: "GK110BGL [Tesla K40s]",
    0x102A: "GK110BGL [Tesla K40t]",
    0x102D: "GK210GL [Tesla K80]",
    0x102E: "GK110BGL [Tesla K40d]",
    0x102F: "GK110BGL [Tesla Stella Solo]",
    0x103A: "GK110GL [Quadro K6000]",
    0x103C: "GK110GL [Quadro K5200]",
    0x103F: "GK110BGL [Tesla Stella SXM]",
    0x1180: "GK104 [GeForce GTX 680]",
    0x1182: "GK104 [GeForce GTX 760 Ti]",
    0x1183: "GK104 [GeForce GTX 660 Ti]",
    0x1184: "GK104 [GeForce GTX 770]",
    0x1185: "GK104 [GeForce GTX 660 OEM]",
    0x1186: "GK104 [GeForce GTX 660 Ti]",
    0x1187: "GK104 [GeForce GTX 760]",
    0x1188: "GK104 [GeForce GTX 690]",
    0x1189: "GK104 [GeForce GTX 670]",
    0x118A: "GK104GL [GRID K520]",
    0x118B: "GK104GL [GRID K2 GeForce USM]",
    0x118C: "GK104 [GRID K2 NVS USM]",
    0x118D: "GK104GL [GRID K200 vGPU]",
    0x118E: "GK104 [GeForce GTX 760 OEM]",
    0x118F: "GK104GL [Tesla K10]",
    0x1191: "GK104 [GeForce GTX 760 Rev. 2]",
    0x1193: "GK104 [GeForce GTX 760 Ti OEM]",
    0x1194: "GK104GL [Tesla K8]",
    0x1195: "GK104 [GeForce GTX 660 Rev. 2]",
    0x1198: "GK104M [GeForce GTX 880M]",
    0x1199: "GK104M [GeForce GTX 870M]",
    0x119A: "GK104M [GeForce GTX 860M]",
    0x119D: "GK104M [GeForce GTX 775M Mac Edition]",
    0x119E: "GK104M [GeForce GTX 780M Mac Edition]",
    0x119F: "GK104M [GeForce GTX 780M]",
    0x11A0: "GK104M [GeForce GTX 680M]",
    0x11A1: "GK104M [GeForce GTX 670MX]",
    0x11A2: "GK104M [GeForce GTX 675MX Mac Edition]",
    0x11A3: "GK104M [GeForce GTX 680MX]",
    0x11A7: "GK104M [GeForce GTX 675MX]",
    0x11A8: "GK104GLM [Quadro K5100M]",
    0x11A9: "GK104M [GeForce GTX 870M]",
    0x11AF: "GK104GLM [GRID IceCube]",
    0x11B0: "GK104GL [GRID K240Q / K260Q vGPU]",
    0x11B1: "GK104GL [GRID K2 Tesla USM]",
    0x11B4: "GK104GL [Quadro K4200]",
    0x11B6: "GK104GLM [Quadro K3100M]",
    0x11B7: "GK104GLM [Quadro K4100M]",
    0x11B8: "GK104GLM [Quadro K5100M]",
    0x11B9: "GK104GLM",
    0x11BA: "GK104GL [Quadro K5000]",
    0x11BB: "GK104GL [Quadro 4100]",
    0x11BC: "GK104GLM [Quadro K5000M]",
    0x11BD: "GK104GLM [Quadro K4000M]",
    0x11BE: "GK104GLM [Quadro K3000M]",
    0x11BF: "GK104GL [GRID K2]",
    0x11C0: "GK106 [GeForce GTX 660]",
    0x11C2: "GK106 [GeForce GTX 650 Ti Boost]",
    0x11C3: "GK106 [GeForce GTX 650 Ti OEM]",
    0x11C4: "GK106 [GeForce GTX 645 OEM]",
    0x11C5: "GK106 [GeForce GT 740]",
    0x11C6: "GK106 [GeForce GTX 650 Ti]",
    0x11C7: "GK106 [GeForce GTX 750 Ti]",
    0x11C8: "GK106 [GeForce GTX 650 OEM]",
    0x11CB: "GK106 [GeForce GT 740]",
    0x11E0: "GK106M [GeForce GTX 770M]",
    0x11E1: "GK106M [GeForce GTX 765M]",
    0x11E2: "GK106M [GeForce GTX 765M]",
    0x11E3: "GK106M [GeForce GTX 760M]",
    0x11E7: "GK106M",
    0x11FA: "GK106GL [Quadro K4000]",
    0x11FC: "GK106GLM [Quadro K2100M]",
    0x1280: "GK208 [GeForce GT 635]",
    0x1281: "GK208 [GeForce GT 710]",
    0x1282: "GK208 [GeForce GT 640 Rev. 2]",
    0x1284: "GK208 [GeForce GT 630 Rev. 2]",
    0x1286: "GK208 [GeForce GT 720]",
    0x1287: "GK208B [GeForce GT 730]",
    0x1288: "GK208B [GeForce GT 720]",
    0x1289: "GK208 [GeForce GT 710]",
    0x128A: "GK208B",
    0x128B: "GK208B [GeForce GT 710]",
    0x128C: "GK208B",
    0x1290: "GK208M [GeForce GT 730M]",
    0x1291: "GK208M [GeForce GT 735M]",
    0x1292: "GK208M [GeForce GT 740M]",
    0x1293: "GK208M [GeForce GT 730M]",
    0x1294: "GK208M [GeForce GT 740M]",
    0x1295: "GK208M [GeForce 710M]",
    0x1296: "GK208M [GeForce 825M]",
    0x1298: "GK208M [GeForce GT 720M]",
    0x1299: "GK208BM [GeForce 920M]",
    0x129A: "GK208BM [GeForce 910M]",
    0x12A0: "GK208",
    0x12B9: "GK208GLM [Quadro K610M]",
    0x12BA: "GK208GLM [Quadro K510M]",
    0x1340: "GM108M [GeForce 830M]",
    0x1341: "GM108M [GeForce 840M]",
    0x1344: "GM108M [GeForce 845M]",
    0x1346: "GM108M [GeForce 930M]",
    0x1347: "GM108M [GeForce 940M]",
    0x1348: "GM108M [GeForce 945M / 945A]",
    0x1349: "GM108M [GeForce 930M]",
    0x134B: "GM108M [GeForce 940MX]",
    0x134D: "GM108M [GeForce 940MX]",
    0x134E: "GM108M [GeForce 930MX]",
    0x134F: "GM108M [GeForce 920MX]",
    0x137A: "GM108GLM [Quadro K620M / Quadro M500M]",
    0x137B: "GM108GLM [Quadro M520 Mobile]",
    0x137D: "GM108M [GeForce 940A]",
    0x1380: "GM107 [GeForce GTX 750 Ti]",
    0x1381: "GM107 [GeForce GTX 750]",
    0x1382: "GM107 [GeForce GTX 745]",
    0x1389: "GM107GL [GRID M30]",
    0x1390: "GM107M [GeForce 845M]",
    0x1391: "GM107M [GeForce GTX 850M]",
    0x1392: "GM107M [GeForce GTX 860M]",
    0x1393: "GM107M [GeForce 840M]",
    0x1398: "GM107M [GeForce 845M]",
    0x1399: "GM107M [GeForce 945M]",
    0x139A: "GM107M [GeForce GTX 950M]",
    0x139B: "GM107M [GeForce GTX 960M]",
    0x139C: "GM107M [GeForce 940M]",
    0x139D: "GM107M [GeForce GTX 750 Ti]",
    0x13B0: "GM107GLM [Quadro M2000M]",
    0x13B1: "GM107GLM [Quadro M1000M]",
    0x13B2: "GM107GLM [Quadro M600M]",
    0x13B3: "GM107GLM [Quadro K2200M]",
    0x13B4: "GM107GLM [Quadro M620 Mobile]",
    0x13B6: "GM107GLM [Quadro M1200 Mobile]",
    0x13B9: "GM107GL [NVS 810]",
    0x13BA: "GM107GL [Quadro K2200]",
    0x13BB: "GM107GL [Quadro K620]",
    0x13BC: "GM107GL [Quadro K1200]",
    0x13BD: "GM107GL [Tesla M10]",
    0x13C0: "GM204 [GeForce GTX 980]",
    0x13C1: "GM204",
    0x13C2: "GM204 [GeForce GTX 970]",
    0x13C3: "GM204",
    0x13D7: "GM204M [GeForce GTX 980M]",
    0x13D8: "GM204M [GeForce GTX 960 OEM / 970M]",
    0x13D9: "GM204M [GeForce GTX 965M]",
    0x13DA: "GM204M [GeForce GTX 980 Mobile]",
    0x13E7: "GM204GL [GeForce GTX 980 Engineering Sample]",
    0x13F0: "GM204GL [Quadro M5000]",
    0x13F1: "GM204GL [Quadro M4000]",
    0x13F2: "GM204GL [Tesla M60]",
    0x13F3: "GM204GL [Tesla M6]",
    0x13F8: "GM204GLM [Quadro M5000M / M5000 SE]",
    0x13F9: "GM204GLM [Quadro M4000M]",
    0x13FA: "GM204GLM [Quadro M3000M]",
    0x13FB: "GM204GLM [Quadro M5500]",
    0x1401: "GM206 [GeForce GTX 960]",
    0x1402: "GM206 [GeForce GTX 950]",
    0x1404: "GM206 [GeForce GTX 960 FAKE]",
    0x1406: "GM206 [GeForce GTX 960 OEM]",
    0x1407: "GM206 [GeForce GTX 750 v2]",
    0x1427: "GM206M [GeForce GTX 965M]",
    0x1430: "GM206GL [Quadro M2000]",
    0x1431: "GM206GL [Tesla M4]",
    0x1436: "GM206GLM [Quadro M2200 Mobile]",
    0x15F0: "GP100GL [Quadro GP100]",
    0x15F1: "GP100GL",
    0x15F7: "GP100GL [Tesla P100 PCIe 12GB]",
    0x15F8: "GP100GL [Tesla P100 PCIe 16GB]",
    0x15F9: "GP100GL [Tesla P100 SXM2 16GB]",
    0x1617: "GM204M [GeForce GTX 980M]",
    0x1618: "GM204M [GeForce GTX 970M]",
    0x1619: "GM204M [GeForce GTX 965M]",
    0x161A: "GM204M [GeForce GTX 980 Mobile]",
    0x1667: "GM204M [GeForce GTX 965M]",
    0x1725: "GP100",
    0x172E: "GP100",
    0x172F: "GP100",
    0x174D: "GM108M [GeForce MX130]",
    0x174E: "GM108M [GeForce MX110]",
    0x1789: "GM107GL [GRID M3-3020]",
    0x179C: "GM107 [GeForce 940MX]",
    0x17C2: "GM200 [GeForce GTX TITAN X]",
    0x17C8: "GM200 [GeForce GTX 980 Ti]",
    0x17F0: "GM200GL [Quadro M6000]",
    0x17F1: "GM200GL [Quadro M6000 24GB]",
    0x17FD: "GM200GL [Tesla M40]",
    0x1B00: "GP102 [TITAN X]",
    0x1B01: "GP102 [GeForce GTX 1080 Ti 10GB]",
    0x1B02: "GP102 [TITAN Xp]",
    0x1B04: "GP102",
    0x1B06: "GP102 [GeForce GTX 1080 Ti]",
    0x1B07: "GP102 [P102-100]",
    0x1B30: "GP102GL [Quadro P6000]",
    0x1B38: "GP102GL [Tesla P40]",
    0x1B39: "GP102GL [Tesla P10]",
    0x1B70: "GP102GL",
    0x1B78: "GP102GL",
    0x1B80: "GP104 [GeForce GTX 1080]",
    0x1B81: "GP104 [GeForce GTX 1070]",
    0x1B82: "GP104 [GeForce GTX 1070 Ti]",
    0x1B83: "GP104 [GeForce GTX 1060 6GB]",
    0x1B84: "GP104 [GeForce GTX 1060 3GB]",
    0x1B87: "GP104 [P104-100]",
    0x1BA0: "GP104M [GeForce GTX 1080 Mobile]",
    0x1BA1: "GP104M [GeForce GTX 1070 Mobile]",
    0x1BA2: "GP104M [GeForce GTX 1070 Mobile]",
    0x1BA9: "GP104M",
    0x1BAA: "GP104M",
    0x1BAD: "GP104 [GeForce GTX 1070 Engineering Sample]",
    0x1BB0: "GP104GL [Quadro P5000]",
    0x1BB1: "GP104GL [Quadro P4000]",
    0x1BB3: "GP104GL [Tesla P4]",
    0x1BB4: "GP104GL [Tesla P6]",
    0x1BB5: "GP104GLM [Quadro P5200 Mobile]",
    0x1BB6: "GP104GLM [Quadro P5000 Mobile]",
    0x1BB7: "GP104GLM [Quadro P4000 Mobile]",
    0x1BB8: "GP104GLM [Quadro P3000 Mobile]",
    0x1BB9: "GP104GLM [Quadro P4200 Mobile]",
    0x1BBB: "GP104GLM [Quadro P3200 Mobile]",
    0x1BC7: "GP104 [P104-101]",
    0x1BE0: "GP104BM [GeForce GTX 1080 Mobile]",
    0x1BE1: "GP104BM [GeForce GTX 1070 Mobile]",
    0x1C00: "GP106",
    0x1C01: "GP106",
    0x1C02: "GP106 [GeForce GTX 1060 3GB]",
    0x1C03: "GP106 [GeForce GTX 1060 6GB]",
    0x1C04: "GP106 [GeForce GTX 1060 5GB]",
    0x1C06: "GP106 [GeForce GTX 1060 6GB Rev. 2]",
    0x1C07: "GP106 [P106-100]",
    0x1C09: "GP106 [P106-090]",
    0x1C20: "GP106M [GeForce GTX 1060 Mobile]",
    0x1C21: "GP106M [GeForce GTX 1050 Ti Mobile]",
    0x1C22: "GP106M [GeForce GTX 1050 Mobile]",
    0x1C23: "GP106M [GeForce GTX 1060 Mobile Rev. 2]",
    0x1C2D: "GP106M",
    0x1C30: "GP106GL [Quadro P2000]",
    0x1C31: "GP106GL [Quadro P2200]",
    0x1C35: "GP106M [Quadro P2000 Mobile]",
    0x1C36: "GP106 [P106M]",
    0x1C60: "GP106BM [GeForce GTX 1060 Mobile 6GB]",
    0x1C61: "GP106BM [GeForce GTX 1050 Ti Mobile]",
    0x1C62: "GP106BM [GeForce GTX 1050 Mobile]",
    0x1C70: "GP106GL",
    0x1C81: "GP107 [GeForce GTX 1050]",
    0x1C82: "GP107 [GeForce GTX 1050 Ti]",
    0x1C83: "GP107 [GeForce GTX 1050 3GB]",
    0x1C8C: "GP107M [GeForce GTX 1050 Ti Mobile]",
    0x1C8D: "GP107M [GeForce GTX 1050 Mobile]",
    0x1C8E: "GP107M",
    0x1C8F: "GP107M [GeForce GTX 1050 Ti Max-Q]",
    0x1C90: "GP107M [GeForce MX150]",
    0x1C91: "GP107M [GeForce GTX 1050 3 GB Max-Q]",
    0x1C92: "GP107M [GeForce GTX 1050 Mobile]",
    0x1C94: "GP107M [GeForce MX350]",
    0x1C96: "GP107M [GeForce MX350]",
    0x1CA7: "GP107GL",
    0x1CA8: "GP107GL",
    0x1CAA: "GP107GL",
    0x1CB1: "GP107GL [Quadro P1000]",
    0x1CB2: "GP107GL [Quadro P600]",
    0x1CB3: "GP107GL [Quadro P400]",
    0x1CB6: "GP107GL [Quadro P620]",
    0x1CBA: "GP107GLM [Quadro P2000 Mobile]",
    0x1CBB: "GP107GLM [Quadro P1000 Mobile]",
    0x1CBC: "GP107GLM [Quadro P600 Mobile]",
    0x1CBD: "GP107GLM [Quadro P620]",
    0x1CCC: "GP107BM [GeForce GTX 1050 Ti Mobile]",
    0x1CCD: "GP107BM [GeForce GTX 1050 Mobile]",
    0x1CFA: "GP107GL [Quadro P2000]",
    0x1CFB: "GP107GL [Quadro P1000]",
    0x1D01: "GP108 [GeForce GT 1030]",
    0x1D02: "GP108 [GeForce GT 1010]",
    0x1D10: "GP108M [GeForce MX150]",
    0x1D11: "GP108M [GeForce MX230]",
    0x1D12: "GP108M [GeForce MX150]",
    0x1D13: "GP108M [GeForce MX250]",
    0x1D16: "GP108M [GeForce MX330]",
    0x1D33: "GP108GLM [Quadro P500 Mobile]",
    0x1D34: "GP108GLM [Quadro P520]",
    0x1D52: "GP108BM [GeForce MX250]",
    0x1D56: "GP108BM [GeForce MX330]",
    0x1D81: "GV100 [TITAN V]",
    0x1DB1: "GV100GL [Tesla V100 SXM2 16GB]",
    0x1DB2: "GV100GL [Tesla V100 DGXS 16GB]",
    0x1DB3: "GV100GL [Tesla V100 FHHL 16GB]",
    0x1DB4: "GV100GL [Tesla V100 PCIe 16GB]",
    0x1DB5: "GV100GL [Tesla V100 SXM2 32GB]",
    0x1DB6: "GV100GL [Tesla V100 PCIe 32GB]",
    0x1DB7: "GV100GL [Tesla V100 DGXS 32GB]",
    0x1DB8: "GV100GL [Tesla V100 SXM3 32GB]",
    0x1DBA: "GV100GL [Quadro GV100]",
    0x1DBE: "GV100 Engineering Sample",
    0x1DF0: "GV100GL [Tesla PG500-216]",
    0x1DF2: "GV100GL [Tesla PG503-216]",
    0x1DF5: "GV100GL [Tesla V100 SXM2 16GB]",
    0x1DF6: "GV100GL [Tesla V100S PCIe 32GB]",
    0x1E02: "TU102 [TITAN RTX]",
    0x1E03: "TU102 [GeForce RTX 2080 Ti 12GB]",
    0x1E04: "TU102 [GeForce RTX 2080 Ti]",
    0x1E07: "TU102 [GeForce RTX 2080 Ti Rev. A]",
    0x1E09: "TU102 [CMP 50HX]",
    0x1E2D: "TU102 [GeForce RTX 2080 Ti Engineering Sample]",
    0x1E2E: "TU102 [GeForce RTX 2080 Ti 12GB Engineering Sample]",
    0x1E30: "TU102GL [Quadro RTX 6000/8000]",
    0x1E36: "TU102GL [Quadro RTX 6000]",
    0x1E37: "TU102GL [Tesla T10 16GB / GRID RTX T10-2/T10-4/T10-8]",
    0x1E38: "TU102GL [Tesla T40 24GB]",
    0x1E3C: "TU102GL",
    0x1E3D: "TU102GL",
    0x1E3E: "TU102GL",
    0x1E78: "TU102GL [Quadro RTX 6000/8000]",
    0x1E81: "TU104 [GeForce RTX 2080 SUPER]",
    0x1E82: "TU104 [GeForce RTX 2080]",
    0x1E84: "TU104 [GeForce RTX 2070 SUPER]",
    0x1E87: "TU104 [GeForce RTX 2080 Rev. A]",
    0x1E89: "TU104 [GeForce RTX 2060]",
    0x1E90: "TU104M [GeForce RTX 2080 Mobile]",
    0x1E91: "TU104M [GeForce RTX 2070 SUPER Mobile / Max-Q]",
    0x1E93: "TU104M [GeForce RTX 2080 SUPER Mobile / Max-Q]",
    0x1EAB: "TU104M",
    0x1EAE: "TU104M [GeForce GTX 2080 Engineering Sample]",
    0x1EB0: "TU104GL [Quadro RTX 5000]",
    0x1EB1: "TU104GL [Quadro RTX 4000]",
    0x1EB4: "TU104GL [T4G]",
    0x1EB5: "TU104GLM [Quadro RTX 5000 Mobile / Max-Q]",
    0x1EB6: "TU104GLM [Quadro RTX 4000 Mobile / Max-Q]",
    0x1EB8: "TU104GL [Tesla T4]",
    0x1EB9: "TU104GL",
    0x1EBA: "TU104GL [PG189 SKU600]",
    0x1EBE: "TU104GL",
    0x1EC2: "TU104 [GeForce RTX 2070 SUPER]",
    0x1EC7: "TU104 [GeForce RTX 2070 SUPER]",
    0x1ED0: "TU104BM [GeForce RTX 2080 Mobile]",
    0x1ED1: "TU104BM [GeForce RTX 2070 SUPER Mobile / Max-Q]",
    0x1ED3: "TU104BM [GeForce RTX 2080 SUPER Mobile / Max-Q]",
    0x1EF5: "TU104GLM [Quadro RTX 5000 Mobile Refresh]",
    0x1F02: "TU106 [GeForce RTX 2070]",
    0x1F03: "TU106 [GeForce RTX 2060 12GB]",
    0x1F04: "TU106",
    0x1F06: "TU106 [GeForce RTX 2060 SUPER]",
    0x1F07: "TU106 [GeForce RTX 2070 Rev. A]",
    0x1F08: "TU106 [GeForce RTX 2060 Rev. A]",
    0x1F09: "TU106 [GeForce GTX 1660 SUPER]",
    0x1F0A: "TU106 [GeForce GTX 1650]",
    0x1F0B: "TU106 [CMP 40HX]",
    0x1F10: "TU106M [GeForce RTX 2070 Mobile]",
    0x1F11: "TU106M [GeForce RTX 2060 Mobile]",
    0x1F12: "TU106M [GeForce RTX 2060 Max-Q]",
    0x1F14: "TU106M [GeForce RTX 2070 Mobile / Max-Q Refresh]",
    0x1F15: "TU106M [GeForce RTX 2060 Mobile]",
    0x1F2E: "TU106M",
    0x1F36: "TU106GLM [Quadro RTX 3000 Mobile / Max-Q]",
    0x1F42: "TU106 [GeForce RTX 2060 SUPER]",
    0x1F47: "TU106 [GeForce RTX 2060 SUPER]",
    0x1F50: "TU106BM [GeForce RTX 2070 Mobile / Max-Q]",
    0x1F51: "TU106BM [GeForce RTX 2060 Mobile]",
    0x1F54: "TU106BM [GeForce RTX 2070 Mobile]",
    0x1F55: "TU106BM [GeForce RTX 2060 Mobile]",
    0x1F76: "TU106GLM [Quadro RTX 3000 Mobile Refresh]",
    0x1F81: "TU117",
    0x1F82: "TU117 [GeForce GTX 1650]",
    0x1F83: "TU117 [GeForce GTX 1630]",
    0x1F91: "TU117M [GeForce GTX 1650 Mobile / Max-Q]",
    0x1F92: "TU117M [GeForce GTX 1650 Mobile]",
    0x1F94: "TU117M [GeForce GTX 1650 Mobile]",
    0x1F95: "TU117M [GeForce GTX 1650 Ti Mobile]",
    0x1F96: "TU117M [GeForce GTX 1650 Mobile / Max-Q]",
    0x1F97: "TU117M [GeForce MX450]",
    0x1F98: "TU117M [GeForce MX450]",
    0x1F99: "TU117M",
    0x1F9C: "TU117M [GeForce MX450]",
    0x1F9D: "TU117M [GeForce GTX 1650 Mobile / Max-Q]",
    0x1F9F: "TU117M [GeForce MX550]",
    0x1FA0: "TU117M [GeForce MX550]",
    0x1FA1: "TU117M",
    0x1FAE: "TU117GL",
    0x1FB0: "TU117GLM [Quadro T1000 Mobile]",
    0x1FB1: "TU117GL [T600]",
    0x1FB2: "TU117GLM [Quadro T400 Mobile]",
    0x1FB6: "TU117GLM [T600 Laptop GPU]",
    0x1FB7: "TU117GLM [T550 Laptop GPU]",
    0x1FB8: "TU117GLM [Quadro T2000 Mobile / Max-Q]",
    0x1FB9: "TU117GLM [Quadro T1000 Mobile]",
    0x1FBA: "TU117GLM [T600 Mobile]",
    0x1FBB: "TU117GLM [Quadro T500 Mobile]",
    0x1FBC: "TU117GLM [T1200 Laptop GPU]",
    0x1FBF: "TU117GL",
    0x1FD9: "TU117BM [GeForce GTX 1650 Mobile Refresh]",
    0x1FDD: "TU117BM [GeForce GTX 1650 Mobile Refresh]",
    0x1FF0: "TU117GL [T1000 8GB]",
    0x1FF2: "TU117GL [T400 4GB]",
    0x1FF9: "TU117GLM [Quadro T1000 Mobile]",
    0x2182: "TU116 [GeForce GTX 1660 Ti]",
    0x2183: "TU116",
    0x2184: "TU116 [GeForce GTX 1660]",
    0x2187: "TU116 [GeForce GTX 1650 SUPER]",
    0x2188: "TU116 [GeForce GTX 1650]",
    0x2189: "TU116 [CMP 30HX]",
    0x2191: "TU116M [GeForce GTX 1660 Ti Mobile]",
    0x2192: "TU116M [GeForce GTX 1650 Ti Mobile]",
    0x21AE: "TU116GL",
    0x21BF: "TU116GL",
    0x21C2: "TU116",
    0x21C4: "TU116 [GeForce GTX 1660 SUPER]",
    0x21D1: "TU116BM [GeForce GTX 1660 Ti Mobile]",
}

# A chip name's first two letters -> the architecture (NVIDIA's code names: GK104, GP102GL, TU104GL).
CHIP_ARCH = {"GK": "kepler", "GM": "maxwell", "GP": "pascal", "GV": "volta", "TU": "turing"}
ARCHS = ("kepler", "maxwell", "pascal", "volta", "turing")
# The newest driver branch that still drives each architecture; None: no end announced. R580 is the
# last for Maxwell, Pascal and Volta (NVIDIA's deprecation schedule); R470 was the last for Kepler (NVIDIA's support notice
# of 2021), which leaves Kepler below what CUDA 11.8 needs.
LAST_BRANCH: dict[str, int | None] = {"kepler": 470, "maxwell": 580, "pascal": 580, "volta": 580, "turing": None}
# The open kernel modules need the GSP: Turing and newer.
OPEN_ARCHS = {"turing"}
# CUDA 11.8's minimum driver (its runfile bundles 520.61.05).
CUDA_MIN_DRIVER = (520, 61, 5)
# The branch the project's plans install (Ubuntu's -server packages, NVIDIA's runfile): auto takes it,
# or the cards' last branch where that is older.
PROJECT_BRANCH = 580
# Debian's non-free driver per release (Debian's archive: bookworm nvidia-driver 535.261.03, trixie 550.163.01;
# bullseye's is R470, older than CUDA 11.8 needs).
DEBIAN_DISTRO_BRANCH = {"11": 470, "12": 535, "13": 550}
SUPPORTED_OS = {"ubuntu": ("20.04", "22.04", "24.04"), "debian": ("11", "12", "13")}
RUNFILE_ARTIFACT = "nvidia_driver_runfile"
NOUVEAU_CONF = "/etc/modprobe.d/verl-p40-nouveau.conf"
NOUVEAU_TEXT = "blacklist nouveau\noptions nouveau modeset=0\n"
AGAIN = "reboot, then run the same command again"


def _version(text: str | None) -> tuple[int, ...] | None:
    match = re.match(r"^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text or ""))
    return tuple(int(part or 0) for part in match.groups()) if match else None


def _dotted(version: tuple[int, ...]) -> str:
    return "%d.%02d.%02d" % version if len(version) == 3 and version[0] >= 400 else ".".join(map(str, version))


def gpu_arch(device: int | str) -> dict[str, Any]:
    """One NVIDIA device id -> its id, pci.ids name and architecture (None where the table lacks it)."""
    number = int(device, 16) if isinstance(device, str) else int(device)
    name = NVIDIA_GPUS.get(number)
    arch = CHIP_ARCH.get(name[:2]) if name else None
    return {"id": "10de:%04x" % number, "device": number, "name": name or "unknown", "arch": arch}


def _gpu(address: str, vendor: int, device: int, pci_class: int, driver: str | None = None) -> dict[str, Any]:
    entry = gpu_arch(device)
    entry.update({"address": address, "class": "0x%06x" % pci_class, "driver": driver})
    return entry


def pci_gpus(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The NVIDIA display devices (class 0x03xx) of driver_info's `devices` (address, vendor, device,
    class, driver), by address. Each entry: address, id (10de:xxxx), device, name, arch (None: not in
    the table), class and the kernel driver bound to it (nouveau, nvidia, vfio-pci, or None)."""
    found = []
    for entry in sorted(devices or [], key=lambda item: str(item.get("address"))):
        vendor, pci_class = int(entry.get("vendor", 0)), int(entry.get("class", 0))
        if vendor != NVIDIA_VENDOR or pci_class >> 16 != DISPLAY_CLASS:
            continue
        found.append(_gpu(str(entry["address"]), vendor, int(entry["device"]), pci_class, entry.get("driver")))
    return found


def _cards(gpus: list[dict[str, Any]], arch: str) -> str:
    names = sorted({"%s (%s)" % (gpu["name"], gpu["id"]) for gpu in gpus if gpu.get("arch") == arch})
    return ", ".join(names)


def driver_choice(gpus: list[dict[str, Any]], branch: str | int = "auto", flavour: str = "auto") -> dict[str, Any]:
    """The branch and flavour that drive every card found, and what stands in the way.

    branch: auto (PROJECT_BRANCH, or the cards' last branch where older) or a branch number;
    flavour: auto (proprietary), proprietary, or open (only where every card is Turing or newer)."""
    known = [gpu for gpu in gpus if gpu.get("arch")]
    unknown = sorted({gpu["id"] for gpu in gpus if not gpu.get("arch")})
    archs = sorted({gpu["arch"] for gpu in known}, key=ARCHS.index)
    limits = [(LAST_BRANCH[arch], arch) for arch in archs if LAST_BRANCH[arch] is not None]
    limit = min(limits)[0] if limits else None
    problems = []
    if unknown and not known:
        problems.append(
            "NVIDIA device %s is not in the driver layer's table (pci.ids %s: Kepler to Turing), so its"
            " architecture, and the driver branches that drive it, are unknown; install a driver yourself"
            " and set driver_install: never" % (", ".join(unknown), PCI_IDS_VERSION)
        )
    for last, arch in limits:
        if last < CUDA_MIN_DRIVER[0]:
            problems.append(
                "%s: %s cards have no driver newer than R%d, and CUDA 11.8 needs %s or newer: this stack"
                " cannot run on them" % (_cards(known, arch), arch.capitalize(), last, _dotted(CUDA_MIN_DRIVER))
            )
    if str(branch) == "auto":
        chosen = PROJECT_BRANCH if limit is None else min(limit, PROJECT_BRANCH)
    else:
        chosen = int(branch)
        if limit is not None and chosen > limit:
            (arch,) = [arch for last, arch in limits if last == limit][:1]
            problems.append(
                "driver_branch %d: R%d is the last branch for %s cards (%s); a newer driver does not see"
                " them" % (chosen, limit, arch.capitalize(), _cards(known, arch))
            )
        if chosen < CUDA_MIN_DRIVER[0]:
            problems.append("driver_branch %d: CUDA 11.8 needs %s or newer" % (chosen, _dotted(CUDA_MIN_DRIVER)))
    before_turing = [arch for arch in archs if arch not in OPEN_ARCHS]
    open_allowed = bool(known) and not before_turing and not unknown
    chosen_flavour = "proprietary" if flavour == "auto" else flavour
    if chosen_flavour == "open" and not open_allowed:
        held_back = ", ".join(_cards(known, arch) for arch in before_turing) or ", ".join(unknown)
        problems.append(
            "driver_flavour open: the open kernel modules need Turing or newer (the GSP), and %s is not;"
            " use proprietary" % held_back
        )
    return {
        "branch": chosen,
        "flavour": chosen_flavour,
        "limit": limit,
        "archs": archs,
        "open_allowed": open_allowed,
        "unknown": unknown,
        "problems": problems,
    }


def _os(facts: dict[str, Any]) -> tuple[str, str, str]:
    distribution = str(facts.get("distribution", "")).lower()
    version = str(facts.get("version", ""))
    if distribution == "debian":
        version = version.split(".")[0]
    return distribution, version, str(facts.get("kernel", ""))


def driver_source(facts: dict[str, Any], source: str = "auto") -> str:
    """auto -> distro on Ubuntu 22.04 and 24.04 (Ubuntu's R580 -server packages), runfile elsewhere
    (Debian, whose archive has no R580; Ubuntu 20.04, for which Canonical publishes no R580 modules)."""
    if source != "auto":
        return source
    distribution, version, _ = _os(facts)
    return "distro" if distribution == "ubuntu" and version in ("22.04", "24.04") else "runfile"


def driver_plan(
    facts: dict[str, Any],
    source: str = "auto",
    branch: int = PROJECT_BRANCH,
    flavour: str = "proprietary",
    requested: str | int = "auto",
    runfile: dict[str, Any] | None = None,
    prebuilt: bool | None = None,
) -> dict[str, Any]:
    """How to install the driver on this OS.

    facts: distribution, version (ansible_distribution_version), kernel (the release to build for:
    driver_kernel, else the running one) and running_kernel (uname -r; absent: kernel).
    runfile: the manifest entry RUNFILE_ARTIFACT (version, file, url, sha256), for the runfile source.
    prebuilt: Ubuntu: whether Canonical's signed modules for the running kernel exist
    (linux-modules-nvidia-<branch>-server-<kernel>; apt-cache policy says); None: not asked yet.

    The result: method (apt, runfile), branch, flavour, modules (prebuilt, dkms), packages (the kernel
    headers first where something builds), hold (apt-mark hold), runfile (artifact key, args), nouveau
    (path, text), initramfs (argv), problems (a stop's reasons) and steps (the same as shell lines)."""
    distribution, version, kernel = _os(facts)
    source = driver_source(facts, source)
    problems: list[str] = []
    if version not in SUPPORTED_OS.get(distribution, ()):
        problems.append(
            "the driver layer knows Ubuntu 20.04, 22.04, 24.04 and Debian 11, 12, 13, not %s %s"
            % (distribution, version)
        )
    if not kernel:
        problems.append("the running kernel's release (uname -r) is not known")
    headers = ["linux-headers-" + kernel]
    plan: dict[str, Any] = {
        "source": source,
        "branch": int(branch),
        "flavour": flavour,
        "packages": [],
        "hold": [],
        "runfile": None,
        "nouveau": {"path": NOUVEAU_CONF, "text": NOUVEAU_TEXT},
        "initramfs": ["update-initramfs", "-u"],
        "problems": problems,
    }
    if source == "distro" and distribution == "ubuntu":
        name = "%d-server%s" % (int(branch), "-open" if flavour == "open" else "")
        # nvidia-compute-utils ships nvidia-persistenced and its systemd unit.
        userspace = ["nvidia-headless-no-dkms-" + name, "nvidia-utils-" + name, "nvidia-compute-utils-" + name]
        signed = "linux-modules-nvidia-%s-%s" % (name, kernel)
        if prebuilt is False:
            plan.update(modules="dkms", packages=headers + ["nvidia-dkms-" + name] + userspace)
            plan["hold"] = ["nvidia-dkms-" + name] + userspace
        else:
            plan.update(modules="prebuilt", packages=[signed] + userspace, hold=[signed] + userspace)
        plan.update(method="apt", prebuilt_package=signed, dkms_packages=headers + ["nvidia-dkms-" + name])
    elif source == "distro" and distribution == "debian":
        distro_branch = DEBIAN_DISTRO_BRANCH.get(version)
        plan.update(
            method="apt", modules="dkms", branch=distro_branch, components=["contrib", "non-free", "non-free-firmware"]
        )
        if distro_branch is not None and distro_branch < CUDA_MIN_DRIVER[0]:
            problems.append(
                "driver_source distro: Debian %s's non-free driver is R%d, older than the %s CUDA 11.8 needs;"
                " use driver_source: runfile" % (version, distro_branch, _dotted(CUDA_MIN_DRIVER))
            )
        if str(requested) != "auto" and distro_branch is not None and int(requested) != distro_branch:
            problems.append(
                "driver_branch %s: Debian %s's non-free packages are R%d; use driver_source: runfile for another"
                " branch" % (requested, version, distro_branch)
            )
        if flavour == "open":
            problems.append("driver_source distro on Debian: the layer installs the proprietary modules only")
        if version == "11":
            plan["components"] = ["contrib", "non-free"]
        # nvidia-persistenced (contrib) brings its systemd unit and enables it.
        kept = ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "nvidia-persistenced"]
        plan.update(packages=headers + kept, hold=list(kept))
    elif source == "runfile":
        entry = dict(runfile or {})
        plan.update(method="runfile", modules="dkms", packages=headers + ["dkms", "gcc", "make"])
        plan["runfile"] = {
            "artifact": RUNFILE_ARTIFACT,
            "file": entry.get("file", ""),
            "version": str(entry.get("version", "")),
            "args": ["--silent", "--dkms", "-m=" + ("kernel-open" if flavour == "open" else "kernel")],
        }
        running = str(facts.get("running_kernel") or kernel)
        if kernel and kernel != running:
            # NVIDIA's installer builds for the running kernel unless told (-k, --kernel-name).
            plan["runfile"]["args"].append("--kernel-name=" + kernel)
        pinned = _version(entry.get("version"))
        if not entry.get("sha256") or not entry.get("url") or pinned is None:
            problems.append(
                "driver_source runfile: the manifest entry %s (version, file, url, sha256 of NVIDIA's R%d"
                " .run installer) is not pinned yet; pin it in stack_artifact_overrides, or use driver_source: distro%s"
                % (RUNFILE_ARTIFACT, int(branch), " (Ubuntu's packages)" if distribution == "ubuntu" else "")
            )
        elif pinned[0] != int(branch):
            problems.append(
                "driver_branch %d: the pinned runfile %s is R%d; pin the %d one in %s"
                % (int(branch), entry.get("file"), pinned[0], int(branch), RUNFILE_ARTIFACT)
            )
    else:
        problems.append("driver_source %r: give auto, distro or runfile" % source)
    plan["steps"] = _steps(plan, kernel)
    return plan


def _steps(plan: dict[str, Any], kernel: str) -> list[str]:
    """The plan as the shell lines a person would run."""
    lines = []
    if plan.get("components"):
        lines.append("# enable the %s components in /etc/apt/sources.list, then:" % " ".join(plan["components"]))
    lines.append("sudo apt-get update")
    if plan.get("method") == "apt" and plan.get("modules") == "prebuilt":
        lines.append(
            "apt-cache policy %s   # Canonical's signed modules for this kernel; where there are none,"
            " install %s in its place" % (plan["prebuilt_package"], " ".join(plan["dkms_packages"]))
        )
    if plan.get("packages"):
        lines.append("sudo apt-get install -y " + " ".join(shlex.quote(name) for name in plan["packages"]))
    if plan.get("method") == "runfile" and plan.get("runfile"):
        runfile = plan["runfile"]
        file = runfile["file"] or "NVIDIA-Linux-x86_64-%d.<version>.run" % plan["branch"]
        lines.append(
            "# download %s and check its sha256 against the manifest's %s, then:" % (file, runfile["artifact"])
        )
        lines.append("sudo sh ./%s %s" % (shlex.quote(file), " ".join(runfile["args"])))
    if plan.get("hold"):
        lines.append("sudo apt-mark hold " + " ".join(plan["hold"]))
    lines.append("printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee %s" % NOUVEAU_CONF)
    lines.append("sudo update-initramfs -u")
    lines.append("sudo reboot   # then: nvidia-smi")
    return lines


def _unsuitable(installed: dict[str, Any], choice: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    """Why the present driver will not do ('' where it will): none, a branch too new for a card,
    older than CUDA 11.8 needs, the open modules with a card older than Turing, or not working."""
    version = _version(installed.get("version"))
    if version is None:
        return "no NVIDIA driver is installed"
    shown = installed.get("version")
    limit = choice["limit"]
    if limit is not None and version[0] > limit:
        arch = next(arch for arch in choice["archs"] if LAST_BRANCH[arch] == limit)
        return "driver %s cannot drive %s: R%d is the last branch for %s" % (
            shown,
            _cards(gpus, arch),
            limit,
            arch.capitalize(),
        )
    if version < CUDA_MIN_DRIVER:
        return "driver %s is older than the %s CUDA 11.8 needs" % (shown, _dotted(CUDA_MIN_DRIVER))
    if installed.get("flavour") == "open" and not choice["open_allowed"]:
        return "driver %s has the open kernel modules, which cannot drive cards older than Turing" % shown
    if not installed.get("working", False):
        return "driver %s is installed but does not work (nvidia-smi sees no GPU)" % shown
    return ""


def driver_decision(
    gpus: list[dict[str, Any]],
    installed: dict[str, Any] | None = None,
    mode: str = "auto",
    facts: dict[str, Any] | None = None,
    source: str = "auto",
    branch: str | int = "auto",
    flavour: str = "auto",
    runfile: dict[str, Any] | None = None,
    prebuilt: bool | None = None,
) -> dict[str, Any]:
    """Keep, install or stop, for driver_install auto (install where no working, suitable driver is
    there), never (keep a suitable one, else stop with the exact steps) or always (install the chosen
    branch whatever is there: the way to change branch).

    installed: version (nvidia-smi's or the module's, None: none), working (nvidia-smi sees the cards),
    flavour (open, proprietary, None: not known). The result: action (none, keep, install, stop),
    reason, choice (driver_choice), plan (driver_plan) and message (for a stop: what and the steps)."""
    installed = dict(installed or {})
    if mode not in ("auto", "never", "always"):
        raise AnsibleFilterError("driver_install %r: give auto, never or always" % (mode,))
    if not gpus:
        return {"action": "none", "reason": "no NVIDIA display device on the PCI bus", "message": ""}
    choice = driver_choice(gpus, branch, flavour)
    plan = driver_plan(facts or {}, source, choice["branch"], choice["flavour"], branch, runfile, prebuilt)
    if plan["source"] == "distro" and _os(facts or {})[0] == "debian" and plan["branch"] is not None:
        choice = dict(choice, branch=plan["branch"])
    result = {"choice": choice, "plan": plan, "message": ""}
    why = _unsuitable(installed, choice, gpus)
    problems = choice["problems"] + plan["problems"]
    if not why and mode != "always":
        return dict(result, action="keep", reason="driver %s drives every card found" % installed["version"])
    if mode == "never":
        steps = "\n  ".join(plan["steps"])
        message = (
            "driver_install: never, and %s. Install R%s (%s modules) yourself, then run the same command"
            " again (or set driver_install: auto):\n  %s" % (why, plan["branch"], plan["flavour"], steps)
        )
        if problems:
            message += "\nBeware:\n- " + "\n- ".join(problems)
        return dict(result, action="stop", reason=why, message=message)
    if problems:
        why = why or "driver_install: always"
        message = "%s; the driver layer cannot install one here:\n- %s" % (
            why[0].upper() + why[1:],
            "\n- ".join(problems),
        )
        return dict(result, action="stop", reason=why, message=message)
    reason = why or "driver_install: always (driver %s is replaced by R%s)" % (installed.get("version"), plan["branch"])
    return dict(result, action="install", reason=reason)


def driver_after_install(
    gpus: list[dict[str, Any]],
    loaded: str | None,
    installed: str,
    reboot: bool = False,
    kernel: str = "",
    running: str = "",
) -> dict[str, Any]:
    """After the install: load the module, reboot, or stop.

    gpus: driver_pci_gpus again (each card's bound kernel driver); loaded: the version of the nvidia
    module the running kernel has (/sys/module/nvidia/version), None where none; installed: the
    version just installed; reboot: driver_reboot; kernel: the kernel it was built for (driver_kernel),
    running: the running one. A kernel not running, a card bound to nouveau, or another nvidia module
    loaded, needs a reboot: with driver_reboot the layer reboots, else it stops with AGAIN (and
    records the layer as waiting for it)."""
    nouveau = sorted(gpu["address"] for gpu in gpus if gpu.get("driver") == "nouveau")
    if kernel and running and kernel != running:
        why = "it was built for the kernel %s and the running kernel is %s" % (kernel, running)
    elif nouveau:
        why = "nouveau drives %s" % ", ".join(nouveau)
    elif loaded and _version(loaded) != _version(installed):
        why = "the running kernel has the nvidia module %s loaded, not %s" % (loaded, installed)
    else:
        return {"action": "load" if not loaded else "none", "message": ""}
    if reboot:
        return {
            "action": "reboot",
            "message": "driver %s installed; %s: rebooting (driver_reboot: true)" % (installed, why),
        }
    return {
        "action": "stop",
        "message": "driver %s is installed, but %s: %s (or set driver_reboot: true)." % (installed, why, AGAIN),
    }


def driver_secure_boot(plan: dict[str, Any], state: str, key: str = "", cert: str = "") -> dict[str, Any]:
    """What Secure Boot asks of the install: nothing (off, or Canonical's signed prebuilt modules),
    the signing arguments for NVIDIA's installer (driver_mok_key and driver_mok_cert, a key pair whose
    certificate the firmware trusts), or a stop with the steps to make and enrol one. state:
    driver_info's secure_boot (enabled, disabled, unknown: treated as off, and said so)."""
    if state != "enabled" or plan.get("modules") == "prebuilt":
        return {"action": "none", "args": [], "message": ""}
    if key and cert and plan.get("method") == "runfile":
        return {
            "action": "sign",
            "args": ["--module-signing-secret-key=" + key, "--module-signing-public-key=" + cert],
            "message": "",
        }
    if key and cert:
        why = (
            "driver_source distro builds the modules with DKMS, which signs them with its own key"
            " (/var/lib/dkms/mok.key, or mok_signing_key in /etc/dkms/framework.conf): point DKMS at your"
            " key pair there, enrol its certificate, and set driver_mok_key and driver_mok_cert to ''"
        )
    else:
        why = (
            "the modules this install builds are not signed by a key the firmware trusts, so the kernel"
            " would refuse them. Make a key pair (openssl req -new -x509 -newkey rsa:2048 -nodes -days 36500"
            " -subj '/CN=verl-p40 module signing/' -keyout /root/mok.key -outform DER -out /root/mok.der),"
            " enrol it (sudo mokutil --import /root/mok.der, then reboot and confirm it at the console),"
            " then set driver_mok_key: /root/mok.key and driver_mok_cert: /root/mok.der"
        )
    return {"action": "stop", "args": [], "message": "Secure Boot is on, and " + why + "."}


# A system user's name as useradd takes it (Debian's NAME_REGEX for system users, at most 32).
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}\Z")


def driver_user_check(name: Any, training_user: str = "") -> str:
    """Refuse a driver_persistenced_user that is no user name, root or the training user (the daemon
    would run as a person, or root's account would be changed); '' when fine (for a template)."""
    if not isinstance(name, str) or not USER_NAME.match(name) or name in ("root", training_user):
        raise AnsibleFilterError(
            "driver_persistenced_user %s is not a name for the daemon's system user: give lowercase letters,"
            " digits, _ and - (at most 32, not starting with a digit or -), not root nor the training user %s,"
            " or leave the default nvidia-persistenced." % (json.dumps(name), training_user)
        )
    return ""


class FilterModule:
    """The driver layer's decisions."""

    def filters(self) -> dict[str, Any]:
        return {
            "driver_gpu_arch": gpu_arch,
            "driver_pci_gpus": pci_gpus,
            "driver_choice": driver_choice,
            "driver_source": driver_source,
            "driver_plan": driver_plan,
            "driver_decision": driver_decision,
            "driver_after_install": driver_after_install,
            "driver_secure_boot": driver_secure_boot,
            "driver_user_check": driver_user_check,
        }
