// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/**
 * A payer's ledger with the ABI of the 0G Compute Network's LedgerManager, as far as svc-router pays providers
 * through it: a ledger per payer (`addLedger`, `depositFund`, `refund`), funds moved into the payer's
 * sub-account with one provider on a registered serving contract (`transferFund`), and taken back from it
 * (`retrieveFund`: what a past request's lock time freed comes back now, the rest is asked for again).
 * Written for svc-router's tests and `demo:chain`; not an upgradeable proxy.
 *
 * Balances: `totalBalance` is what the payer owns here and in its sub-accounts; `availableBalance` the part
 * still on the ledger. A serving contract reports what a provider took (`spendFund`), which lowers the total.
 */
interface IServing {
    function accountExists(address user, address provider) external view returns (bool);
    function getPendingRefund(address user, address provider) external view returns (uint);
    function addAccount(address user, address provider, string memory additionalInfo) external payable;
    function depositFund(address user, address provider, uint cancelRetrievingAmount) external payable;
    function requestRefundAll(address user, address provider) external;
    function processRefund(address user, address provider) external returns (uint totalAmount, uint balance, uint pendingRefund);
}

struct Ledger {
    address user;
    uint availableBalance;
    uint totalBalance;
    string additionalInfo;
}

struct ServiceInfo {
    address serviceAddress;
    IServing serviceContract;
    string serviceType;
    string version;
    string fullName;
    string description;
    bool isRecommended;
    uint256 registeredAt;
}

contract LedgerManager {
    uint public constant MIN_ACCOUNT_BALANCE = 3 ether;
    uint public constant MIN_TRANSFER_AMOUNT = 1 ether;
    uint public constant MAX_PROVIDERS_PER_BATCH = 20;

    address public owner;
    mapping(address => Ledger) private ledgers;
    mapping(address => bool) private hasLedger;
    mapping(address => ServiceInfo) private services;
    mapping(string => address) private byName;
    mapping(bytes32 => address) private recommended;
    mapping(address => mapping(address => address[])) private providersOf;
    /** One operation per payer at a time: a serving contract cannot call back into a payer's half-done change. */
    mapping(address => bool) private busy;

    event ServiceRegistered(address indexed serviceAddress, string serviceName);
    event RecommendedServiceUpdated(string serviceType, string version, address serviceAddress);
    event FundSpent(address indexed user, address indexed service, uint256 amount);

    error LedgerNotExists(address user);
    error LedgerExists(address user);
    error InsufficientBalance(address user);
    error TooManyProviders(uint requested, uint maximum);
    error ServiceNotFound(address serviceAddress);
    error ServiceNameExists(string serviceName);
    error ServiceAlreadyRegistered(address serviceAddress);
    error InvalidServiceAddress(address serviceAddress);
    error NoRecommendedService(string serviceType);
    error MinimumDepositRequired(uint256 provided, uint256 required);
    error InsufficientAvailableBalance(uint256 available, uint256 required);
    error CallerNotRegisteredService(address caller);
    error ZeroAmountNotAllowed();
    error LedgerLocked();
    error TransferFailed();
    error CallFailed();
    error DirectDepositsDisabled();
    error NotOwner(address caller);

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    modifier locked(address user) {
        if (busy[user]) revert LedgerLocked();
        busy[user] = true;
        _;
        busy[user] = false;
    }

    constructor() {
        owner = msg.sender;
    }

    function registerService(string memory serviceType, string memory version, address serviceAddress, string memory description) external onlyOwner {
        if (serviceAddress == address(0)) revert InvalidServiceAddress(serviceAddress);
        if (services[serviceAddress].serviceAddress != address(0)) revert ServiceAlreadyRegistered(serviceAddress);
        string memory fullName = string(abi.encodePacked(serviceType, "-", version));
        if (byName[fullName] != address(0)) revert ServiceNameExists(fullName);
        services[serviceAddress] = ServiceInfo(serviceAddress, IServing(serviceAddress), serviceType, version, fullName, description, false, block.timestamp);
        byName[fullName] = serviceAddress;
        emit ServiceRegistered(serviceAddress, fullName);
    }

    function setRecommendedService(string memory serviceType, string memory version) external onlyOwner {
        address at = byName[string(abi.encodePacked(serviceType, "-", version))];
        if (at == address(0)) revert ServiceNotFound(at);
        bytes32 kind = keccak256(bytes(serviceType));
        address old = recommended[kind];
        if (old != address(0)) services[old].isRecommended = false;
        recommended[kind] = at;
        services[at].isRecommended = true;
        emit RecommendedServiceUpdated(serviceType, version, at);
    }

    function getRecommendedService(string memory serviceType) external view returns (string memory version, address serviceAddress) {
        address at = recommended[keccak256(bytes(serviceType))];
        if (at == address(0)) revert NoRecommendedService(serviceType);
        return (services[at].version, at);
    }

    function getServiceInfo(address serviceAddress) external view returns (ServiceInfo memory) {
        return services[serviceAddress];
    }

    function getServiceAddressByName(string memory serviceName) external view returns (address) {
        return byName[serviceName];
    }

    function getLedger(address user) public view returns (Ledger memory) {
        return _ledger(user);
    }

    function getLedgerProviders(address user, string memory serviceName) external view returns (address[] memory) {
        address at = byName[serviceName];
        if (at == address(0)) revert ServiceNotFound(at);
        return providersOf[user][at];
    }

    function addLedger(string memory additionalInfo) external payable locked(msg.sender) returns (uint, uint) {
        if (msg.value < MIN_ACCOUNT_BALANCE) revert MinimumDepositRequired(msg.value, MIN_ACCOUNT_BALANCE);
        if (hasLedger[msg.sender]) revert LedgerExists(msg.sender);
        _open(msg.sender, msg.value, additionalInfo);
        return (msg.value, 0);
    }

    function depositFund() external payable locked(msg.sender) {
        _credit(msg.sender, msg.value);
    }

    function depositFundFor(address recipient) external payable locked(recipient) {
        _credit(recipient, msg.value);
    }

    /** Takes `amount` of the ledger's available balance back to the payer's wallet; what stays is 0 or at least the minimum. */
    function refund(uint amount) external locked(msg.sender) {
        Ledger storage l = _ledger(msg.sender);
        if (l.availableBalance < amount) revert InsufficientBalance(msg.sender);
        uint rest = l.availableBalance - amount;
        if (rest != 0 && rest < MIN_ACCOUNT_BALANCE) revert MinimumDepositRequired(rest, MIN_ACCOUNT_BALANCE);
        l.availableBalance -= amount;
        l.totalBalance -= amount;
        (bool ok, ) = payable(msg.sender).call{value: amount}("");
        if (!ok) revert TransferFailed();
    }

    /**
     * Moves `amount` into the payer's sub-account with `provider` on the named service: a new sub-account needs
     * MIN_TRANSFER_AMOUNT; for an existing one, a pending refund is cancelled first and only the rest leaves the ledger.
     */
    function transferFund(address provider, string memory serviceName, uint amount) external locked(msg.sender) {
        Ledger storage l = _ledger(msg.sender);
        address at = byName[serviceName];
        if (at == address(0)) revert ServiceNotFound(at);
        IServing serving = services[at].serviceContract;
        uint sent = amount;
        bytes memory call;
        if (serving.accountExists(msg.sender, provider)) {
            uint pending = serving.getPendingRefund(msg.sender, provider);
            uint cancel = amount < pending ? amount : pending;
            sent = amount - cancel;
            call = abi.encodeWithSignature("depositFund(address,address,uint256)", msg.sender, provider, cancel);
        } else {
            if (amount < MIN_TRANSFER_AMOUNT) revert MinimumDepositRequired(amount, MIN_TRANSFER_AMOUNT);
            call = abi.encodeWithSignature("addAccount(address,address,string)", msg.sender, provider, l.additionalInfo);
            providersOf[msg.sender][at].push(provider);
        }
        if (l.availableBalance < sent) revert InsufficientAvailableBalance(l.availableBalance, sent);
        l.availableBalance -= sent;
        (bool ok, ) = at.call{value: sent}(call);
        if (!ok) revert CallFailed();
    }

    /** Per provider: refunds whose lock time passed come back to the ledger, and the whole balance is asked back again. */
    function retrieveFund(address[] memory providers, string memory serviceName) external locked(msg.sender) {
        if (providers.length > MAX_PROVIDERS_PER_BATCH) revert TooManyProviders(providers.length, MAX_PROVIDERS_PER_BATCH);
        address at = byName[serviceName];
        if (at == address(0)) revert ServiceNotFound(at);
        IServing serving = services[at].serviceContract;
        Ledger storage l = _ledger(msg.sender);
        uint back = 0;
        for (uint i = 0; i < providers.length; i++) {
            if (!serving.accountExists(msg.sender, providers[i])) continue;
            (uint amount, , ) = serving.processRefund(msg.sender, providers[i]);
            back += amount;
            serving.requestRefundAll(msg.sender, providers[i]);
        }
        l.availableBalance += back;
    }

    /** A registered serving contract reports what a provider settled from `user`'s sub-account. */
    function spendFund(address user, uint amount) external {
        if (services[msg.sender].serviceAddress == address(0)) revert CallerNotRegisteredService(msg.sender);
        Ledger storage l = _ledger(user);
        uint inSubAccounts = l.totalBalance - l.availableBalance;
        if (inSubAccounts < amount) revert InsufficientAvailableBalance(inSubAccounts, amount);
        l.totalBalance -= amount;
        emit FundSpent(user, msg.sender, amount);
    }

    /** Only a serving contract's refunds come in directly. */
    receive() external payable {
        if (services[msg.sender].serviceAddress == address(0)) revert DirectDepositsDisabled();
    }

    function _credit(address user, uint amount) private {
        if (amount == 0) revert ZeroAmountNotAllowed();
        if (!hasLedger[user]) {
            if (amount < MIN_ACCOUNT_BALANCE) revert MinimumDepositRequired(amount, MIN_ACCOUNT_BALANCE);
            _open(user, amount, "");
            return;
        }
        ledgers[user].availableBalance += amount;
        ledgers[user].totalBalance += amount;
    }

    function _open(address user, uint amount, string memory info) private {
        ledgers[user] = Ledger(user, amount, amount, info);
        hasLedger[user] = true;
    }

    function _ledger(address user) private view returns (Ledger storage) {
        if (!hasLedger[user]) revert LedgerNotExists(user);
        return ledgers[user];
    }
}
