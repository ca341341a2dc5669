// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/**
 * A registry of inference services with the ABI of the 0G Compute Network's InferenceServing contract, as far as
 * svc-router reads and pays through it: the `Service` struct in its field order, `getAllServices(offset, limit)`,
 * the service events, the provider's stake and the owner's acknowledgement of a TEE signer; and the payment side:
 * a user's sub-account per provider (`Account`, funded only through the LedgerManager named at deployment), the
 * user's acknowledgement of a provider's signer, session-token revocation (a bit per token id, or a new
 * generation for all), refunds released after `lockTime`, and fees settled with TEE-signed totals (EIP-712,
 * domain "0G Inference Serving" version 1). Written for svc-router's tests and its `demo:chain`.
 *
 * A provider registers from its own account with at least MIN_PROVIDER_STAKE (returned when it removes its
 * service); an update sends no value. Removal swaps the last service into the freed slot, so entries move:
 * a reader sweeps the whole list rather than patching a copy.
 */
struct Service {
    address provider;
    string serviceType;
    string url;
    uint inputPrice;
    uint outputPrice;
    uint updatedAt;
    string model;
    string verifiability;
    string additionalInfo;
    address teeSignerAddress;
    bool teeSignerAcknowledged;
}

struct ServiceParams {
    string serviceType;
    string url;
    string model;
    string verifiability;
    uint inputPrice;
    uint outputPrice;
    string additionalInfo;
    address teeSignerAddress;
}

struct Refund {
    uint index;
    uint amount;
    uint createdAt;
    bool processed;
}

/** A user's sub-account with one provider, in the field order of the 0G contract's `Account`. */
struct Account {
    address user;
    address provider;
    uint nonce;
    uint balance;
    uint pendingRefund;
    Refund[] refunds;
    string additionalInfo;
    bool acknowledged;
    uint validRefundsLength;
    uint generation;
    uint256 revokedBitmap;
}

struct TEESettlementData {
    address user;
    address provider;
    uint totalFee;
    bytes32 requestsHash;
    uint nonce;
    bytes signature;
}

enum SettlementStatus {
    SUCCESS,
    PARTIAL,
    PROVIDER_MISMATCH,
    NO_TEE_SIGNER,
    INVALID_NONCE,
    INVALID_SIGNATURE
}

interface ILedgerSpend {
    function spendFund(address user, uint amount) external;
}

contract InferenceServing {
    uint public constant MIN_PROVIDER_STAKE = 100 ether;
    uint public constant MAX_PAGE = 50;

    uint public constant MAX_REFUNDS = 5;
    uint public constant MAX_SETTLEMENTS = 50;
    bytes32 private constant DOMAIN_TYPEHASH = keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant SETTLEMENT_TYPEHASH = keccak256("TEESettlement(bytes32 requestsHash,uint256 nonce,address provider,address user,uint256 totalFee)");

    address public owner;
    /** The LedgerManager: the only caller that opens, funds and refunds sub-accounts. */
    address public ledgerAddress;
    /** How long a requested refund stays in the sub-account (a provider may still settle against it). */
    uint public lockTime;
    Service[] private services;
    mapping(address => mapping(address => Account)) private accounts;
    mapping(address => mapping(address => bool)) private opened;
    /** Position + 1 of a provider's service in `services`; 0 when it has none. */
    mapping(address => uint) private slot;
    mapping(address => uint) public stakes;

    event ServiceUpdated(
        address indexed service,
        string serviceType,
        string url,
        uint inputPrice,
        uint outputPrice,
        uint updatedAt,
        string model,
        string verifiability
    );
    event ServiceRemoved(address indexed service);
    event ProviderTEESignerAcknowledged(address indexed provider, address indexed teeSignerAddress, bool acknowledged);
    event ProviderStaked(address indexed provider, uint amount);
    event ProviderStakeReturned(address indexed provider, uint amount);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);
    event BalanceUpdated(address indexed user, address indexed provider, uint amount, uint pendingRefund);
    event RefundRequested(address indexed user, address indexed provider, uint indexed index, uint timestamp);
    event TEESettlementResult(address indexed user, SettlementStatus status, uint256 unsettledAmount);
    event TokenRevoked(address indexed user, address indexed provider, uint8 tokenId);
    event AllTokensRevoked(address indexed user, address indexed provider, uint newGeneration);
    event LockTimeUpdated(uint256 oldLockTime, uint256 newLockTime);

    error ServiceNotExist(address provider);
    error InsufficientStake(uint sent, uint required);
    error StakeOnUpdate();
    error NotOwner(address caller);
    error PageTooLarge(uint limit, uint max);
    error CallerNotLedger(address caller);
    error AccountNotExists(address user, address provider);
    error AccountExists(address user, address provider);
    error ProviderCannotBeUser();
    error TooManyRefunds(address user, address provider);
    error CannotRevokeWithNonZeroBalance(address user, address provider, uint256 balance);
    error NoSettlementsProvided();
    error TooManySettlements(uint256 count, uint256 max);
    error TransferFailed();
    error DirectDepositsDisabled();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    modifier onlyLedger() {
        if (msg.sender != ledgerAddress) revert CallerNotLedger(msg.sender);
        _;
    }

    constructor(address ledger, uint lockTime_) {
        owner = msg.sender;
        ledgerAddress = ledger;
        lockTime = lockTime_;
        emit OwnershipTransferred(address(0), msg.sender);
    }

    function updateLockTime(uint lockTime_) external onlyOwner {
        emit LockTimeUpdated(lockTime, lockTime_);
        lockTime = lockTime_;
    }

    function transferOwnership(address newOwner) external onlyOwner {
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    /** Registers (with the stake) or updates (without value) the caller's service. A new TEE signer needs a new acknowledgement. */
    function addOrUpdateService(ServiceParams calldata params) external payable {
        uint at = slot[msg.sender];
        if (at == 0) {
            if (msg.value < MIN_PROVIDER_STAKE) revert InsufficientStake(msg.value, MIN_PROVIDER_STAKE);
            stakes[msg.sender] = msg.value;
            emit ProviderStaked(msg.sender, msg.value);
            services.push();
            at = services.length;
            slot[msg.sender] = at;
            services[at - 1].provider = msg.sender;
        } else if (msg.value != 0) {
            revert StakeOnUpdate();
        }
        Service storage s = services[at - 1];
        if (s.teeSignerAddress != params.teeSignerAddress) s.teeSignerAcknowledged = false;
        s.serviceType = params.serviceType;
        s.url = params.url;
        s.model = params.model;
        s.verifiability = params.verifiability;
        s.inputPrice = params.inputPrice;
        s.outputPrice = params.outputPrice;
        s.additionalInfo = params.additionalInfo;
        s.teeSignerAddress = params.teeSignerAddress;
        s.updatedAt = block.timestamp;
        emit ServiceUpdated(msg.sender, s.serviceType, s.url, s.inputPrice, s.outputPrice, s.updatedAt, s.model, s.verifiability);
    }

    /** Removes the caller's service and returns its stake. */
    function removeService() external {
        uint at = slot[msg.sender];
        if (at == 0) revert ServiceNotExist(msg.sender);
        uint last = services.length;
        if (at != last) {
            services[at - 1] = services[last - 1];
            slot[services[at - 1].provider] = at;
        }
        services.pop();
        delete slot[msg.sender];
        uint stake = stakes[msg.sender];
        delete stakes[msg.sender];
        emit ServiceRemoved(msg.sender);
        if (stake > 0) {
            emit ProviderStakeReturned(msg.sender, stake);
            (bool ok, ) = payable(msg.sender).call{value: stake}("");
            require(ok, "stake transfer failed");
        }
    }

    function acknowledgeTEESignerByOwner(address provider) external onlyOwner {
        Service storage s = _service(provider);
        s.teeSignerAcknowledged = true;
        emit ProviderTEESignerAcknowledged(provider, s.teeSignerAddress, true);
    }

    function revokeTEESignerAcknowledgement(address provider) external onlyOwner {
        Service storage s = _service(provider);
        s.teeSignerAcknowledged = false;
        emit ProviderTEESignerAcknowledged(provider, s.teeSignerAddress, false);
    }

    function serviceExists(address provider) external view returns (bool) {
        return slot[provider] != 0;
    }

    function getService(address provider) external view returns (Service memory service) {
        return _service(provider);
    }

    /** Services [offset, offset + limit) and how many there are in all; at most MAX_PAGE a call. */
    function getAllServices(uint offset, uint limit) external view returns (Service[] memory list, uint total) {
        if (limit > MAX_PAGE) revert PageTooLarge(limit, MAX_PAGE);
        total = services.length;
        if (offset >= total) return (new Service[](0), total);
        uint end = offset + limit > total ? total : offset + limit;
        list = new Service[](end - offset);
        for (uint i = offset; i < end; i++) list[i - offset] = services[i];
    }

    // ---- Sub-accounts (opened, funded and refunded by the ledger) ----

    function accountExists(address user, address provider) public view returns (bool) {
        return opened[user][provider];
    }

    function getAccount(address user, address provider) external view returns (Account memory) {
        return _account(user, provider);
    }

    function getPendingRefund(address user, address provider) external view returns (uint) {
        return _account(user, provider).pendingRefund;
    }

    function addAccount(address user, address provider, string memory additionalInfo) external payable onlyLedger {
        if (user == provider) revert ProviderCannotBeUser();
        if (opened[user][provider]) revert AccountExists(user, provider);
        Account storage a = accounts[user][provider];
        // A sub-account opened again keeps its nonce and generation: old settlements and tokens stay dead.
        a.user = user;
        a.provider = provider;
        a.balance = msg.value;
        a.additionalInfo = additionalInfo;
        a.acknowledged = true;
        opened[user][provider] = true;
        emit BalanceUpdated(user, provider, a.balance, a.pendingRefund);
    }

    /** Cancels `amount` of the account's pending refunds (or all there are), the latest first. */
    function _cancelRefunds(Account storage a, uint amount) internal {
        uint live = a.validRefundsLength;
        while (amount > 0 && live > 0) {
            Refund storage r = a.refunds[live - 1];
            uint cut = r.amount < amount ? r.amount : amount;
            r.amount -= cut;
            amount -= cut;
            a.pendingRefund -= cut;
            if (r.amount == 0) live--;
        }
        a.validRefundsLength = live;
    }

    /** Funds come in; `cancelRetrievingAmount` of the pending refunds is cancelled, the latest first. */
    function depositFund(address user, address provider, uint cancelRetrievingAmount) external payable onlyLedger {
        Account storage a = _account(user, provider);
        _cancelRefunds(a, cancelRetrievingAmount);
        a.balance += msg.value;
        if (!a.acknowledged) a.acknowledged = true;
        emit BalanceUpdated(user, provider, a.balance, a.pendingRefund);
    }

    function requestRefundAll(address user, address provider) external onlyLedger {
        Account storage a = _account(user, provider);
        uint amount = a.balance - a.pendingRefund;
        if (amount == 0) return;
        uint at = a.validRefundsLength;
        if (at >= MAX_REFUNDS) revert TooManyRefunds(user, provider);
        if (a.refunds.length <= at) a.refunds.push(Refund(at, amount, block.timestamp, false));
        else a.refunds[at] = Refund(at, amount, block.timestamp, false);
        a.validRefundsLength = at + 1;
        a.pendingRefund += amount;
        emit RefundRequested(user, provider, at, block.timestamp);
    }

    /** Pays the ledger the refunds whose lock time has passed; keeps the others, in order. */
    function processRefund(address user, address provider) external onlyLedger returns (uint totalAmount, uint balance, uint pendingRefund) {
        Account storage a = _account(user, provider);
        uint kept = 0;
        for (uint i = 0; i < a.validRefundsLength; i++) {
            Refund memory r = a.refunds[i];
            if (block.timestamp >= r.createdAt + lockTime) {
                totalAmount += r.amount;
            } else {
                r.index = kept;
                a.refunds[kept] = r;
                kept++;
                pendingRefund += r.amount;
            }
        }
        a.validRefundsLength = kept;
        a.balance -= totalAmount;
        a.pendingRefund = pendingRefund;
        balance = a.balance;
        if (totalAmount > 0) {
            emit BalanceUpdated(user, provider, balance, pendingRefund);
            (bool ok, ) = payable(msg.sender).call{value: totalAmount}("");
            if (!ok) revert TransferFailed();
        }
    }

    /** The user trusts (or no longer trusts) the provider's TEE signer; not withdrawn while funds are in. */
    function acknowledgeTEESigner(address provider, bool acknowledged) external {
        Account storage a = _account(msg.sender, provider);
        if (!acknowledged && a.balance != 0) revert CannotRevokeWithNonZeroBalance(msg.sender, provider, a.balance);
        a.acknowledged = acknowledged;
    }

    // ---- Session tokens ----

    function revokeToken(address provider, uint8 tokenId) external {
        Account storage a = _account(msg.sender, provider);
        a.revokedBitmap |= uint256(1) << tokenId;
        emit TokenRevoked(msg.sender, provider, tokenId);
    }

    function revokeAllTokens(address provider) external {
        Account storage a = _account(msg.sender, provider);
        a.generation++;
        a.revokedBitmap = 0;
        emit AllTokensRevoked(msg.sender, provider, a.generation);
    }

    function isTokenRevoked(address user, address provider, uint8 tokenId) external view returns (bool) {
        return (_account(user, provider).revokedBitmap & (uint256(1) << tokenId)) != 0;
    }

    // ---- Settlement ----

    /**
     * The caller (a provider) takes its fees: per entry, `totalFee` from the user's sub-account, signed by its
     * acknowledged TEE signer under a nonce above the last one. What the balance cannot cover stays unsettled.
     * Every entry ends in one TEESettlementResult; what was settled is paid to the caller at once.
     */
    function settleFeesWithTEE(TEESettlementData[] calldata settlements) external returns (uint8[] memory statuses) {
        if (settlements.length == 0) revert NoSettlementsProvided();
        if (settlements.length > MAX_SETTLEMENTS) revert TooManySettlements(settlements.length, MAX_SETTLEMENTS);
        statuses = new uint8[](settlements.length);
        uint paid = 0;
        for (uint i = 0; i < settlements.length; i++) {
            (SettlementStatus status, uint unsettled, uint settled) = _settle(settlements[i]);
            statuses[i] = uint8(status);
            paid += settled;
            emit TEESettlementResult(settlements[i].user, status, unsettled);
        }
        if (paid > 0) {
            (bool ok, ) = payable(msg.sender).call{value: paid}("");
            if (!ok) revert TransferFailed();
        }
    }

    function _settle(TEESettlementData calldata s) private returns (SettlementStatus, uint, uint) {
        if (s.provider != msg.sender || slot[msg.sender] == 0) return (SettlementStatus.PROVIDER_MISMATCH, s.totalFee, 0);
        if (!opened[s.user][msg.sender]) return (SettlementStatus.INVALID_SIGNATURE, s.totalFee, 0);
        Account storage a = accounts[s.user][msg.sender];
        Service storage svc = services[slot[msg.sender] - 1];
        if (!a.acknowledged || !svc.teeSignerAcknowledged || svc.teeSignerAddress == address(0)) return (SettlementStatus.NO_TEE_SIGNER, s.totalFee, 0);
        if (s.nonce <= a.nonce) return (SettlementStatus.INVALID_NONCE, s.totalFee, 0);
        if (_signer(s) != svc.teeSignerAddress) return (SettlementStatus.INVALID_SIGNATURE, s.totalFee, 0);
        a.nonce = s.nonce;
        uint take = s.totalFee > a.balance ? a.balance : s.totalFee;
        uint rest = s.totalFee - take;
        if (take > 0) {
            uint free = a.balance - a.pendingRefund;
            // Beyond the free balance, pending refunds are cancelled, the latest first.
            if (take > free) _cancelRefunds(a, take - free);
            a.balance -= take;
            ILedgerSpend(ledgerAddress).spendFund(s.user, take);
            emit BalanceUpdated(s.user, msg.sender, a.balance, a.pendingRefund);
        }
        return (rest > 0 ? SettlementStatus.PARTIAL : SettlementStatus.SUCCESS, rest, take);
    }

    /** The EIP-712 signer of a settlement; address(0) for a malformed or malleable signature. */
    function _signer(TEESettlementData calldata s) private view returns (address) {
        if (s.signature.length != 65) return address(0);
        bytes32 domain = keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("0G Inference Serving"), keccak256("1"), block.chainid, address(this)));
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", domain, keccak256(abi.encode(SETTLEMENT_TYPEHASH, s.requestsHash, s.nonce, s.provider, s.user, s.totalFee))));
        bytes32 r = bytes32(s.signature[0:32]);
        bytes32 sv = bytes32(s.signature[32:64]);
        uint8 v = uint8(s.signature[64]);
        if (v < 27) v += 27;
        if (uint256(sv) > 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0) return address(0);
        return ecrecover(digest, v, r, sv);
    }

    function _account(address user, address provider) private view returns (Account storage) {
        if (!opened[user][provider]) revert AccountNotExists(user, provider);
        return accounts[user][provider];
    }

    /** Only the ledger's refunds move value in, through the functions above. */
    receive() external payable {
        revert DirectDepositsDisabled();
    }

    function _service(address provider) private view returns (Service storage) {
        uint at = slot[provider];
        if (at == 0) revert ServiceNotExist(provider);
        return services[at - 1];
    }
}
